"""`python -m pipelines.zeitgeist` end to end, as a user runs it."""

import json
import os
import subprocess
import sys

import pytest

from pipelines import config as config_loader
from transforms.zeitgeist.params import DetectorParams, ModelParams

T0 = 1_767_571_200_000
WINDOW = 300_000


def run_cli(*args, check=True):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.zeitgeist", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if check and done.returncode != 0:
        pytest.fail(f"CLI failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def read_jsonl(folder, name):
    rows = []
    for path in sorted(folder.glob(f"{name}*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line]
    return rows


def test_a_rerun_warns_of_outputs_an_earlier_run_left_and_it_does_not_write(
    tmp_path,
):
    small = ("--output", str(tmp_path), "--num_queries", "2", "--days", "1")
    first = run_cli(*small, "--write_window_counts", "--report")
    assert "earlier run" not in first.stderr
    again = run_cli(*small, "--write_window_counts")
    warnings = [line for line in again.stderr.splitlines() if "earlier run" in line]
    assert len(warnings) == 1
    assert "scores*.jsonl, report.html from an earlier run" in warnings[0]
    assert "window_counts" not in warnings[0]  # written again by this run


@pytest.mark.slow
def test_generated_stream_end_to_end(tmp_path):
    done = run_cli(
        "--output",
        str(tmp_path),
        "--num_queries",
        "8",
        "--days",
        "1",
        "--write_window_counts",
    )
    assert "Zeitgeist summary" in done.stdout
    assert (tmp_path / "generated" / "episodes.json").exists()
    windows = read_jsonl(tmp_path, "window_counts")
    # 8 queries over one day of 5-minute windows, all of them active.
    assert len({(w["query"], w["window_start"]) for w in windows}) == 8 * 288
    anomalies = read_jsonl(tmp_path, "anomalies")
    assert anomalies, "the generated day has injected episodes"
    assert {a["kind"] for a in anomalies} <= {"SPIKE", "DIP"}
    assert all(0.0 <= a["score"] <= 1.0 for a in anomalies)
    read = int(done.stdout.split("records read")[1].split()[0])
    assert read > 0
    assert "precision" in done.stdout


def test_file_input_with_bad_lines_goes_to_dead_letters(tmp_path):
    good = [
        {"query": "beam", "event_time": T0 + i * 1000, "record_id": f"r{i}"}
        for i in range(5)
    ]
    lines = [json.dumps(g) for g in good] + [
        "{not json",
        json.dumps({"query": "", "event_time": T0}),
        json.dumps({"query": "beam", "event_time": T0, "count": -3}),
    ]
    source = tmp_path / "searches.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = run_cli(
        "--input", str(source), "--output", str(out), "--write_window_counts"
    )
    windows = read_jsonl(out, "window_counts")
    assert [(w["query"], w["count"]) for w in windows] == [("beam", 5)]
    dead = read_jsonl(out, "dead_letters")
    assert len(dead) == 3
    assert all(d["reason"] for d in dead)
    assert "dead letters           3" in done.stdout


def test_unknown_config_key_is_a_clear_error(tmp_path):
    done = run_cli("--output", str(tmp_path), "--set", "model.alhpa=0.3", check=False)
    assert done.returncode != 0
    assert "unknown key model.alhpa" in done.stderr


def test_overrides_keep_yaml_types():
    defaults = config_loader.read(config_loader.CONFIG_DIR / "zeitgeist.yaml")
    config = config_loader.apply_overrides(
        defaults, ["detector.threshold=6", "window.late_policy=correct"]
    )
    assert config["detector"]["threshold"] == 6
    assert config["window"]["late_policy"] == "correct"
    assert defaults["detector"]["threshold"] == 5.0


def test_the_shipped_config_holds_the_transforms_defaults():
    """A job that builds `Zeitgeist()` in code runs the model and detector
    the CLI runs: `configs/zeitgeist.yaml`'s sections are the dataclasses'
    defaults, so a default tuned in one is not left behind in the other."""
    shipped = config_loader.read(config_loader.CONFIG_DIR / "zeitgeist.yaml")
    assert ModelParams(**shipped["model"]) == ModelParams()
    assert DetectorParams(**shipped["detector"]) == DetectorParams()

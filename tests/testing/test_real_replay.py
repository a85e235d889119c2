"""`zeitgeist_real.py --in_process` stands in for the job: same scores, same
alerts, on a small labelled folder in NAB's layout."""

import importlib.util
import json
import math
import pathlib
import random
import subprocess
import sys

import pytest

from testing.labelled_series import load_folder

BENCHMARK = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/zeitgeist_real.py"
ROWS = 600


def load_benchmark():
    spec = importlib.util.spec_from_file_location("zeitgeist_real", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_series(folder: pathlib.Path, name: str, values: list[float]) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["timestamp,value"]
    lines += [f"{stamp(i)},{value}" for i, value in enumerate(values)]
    path.write_text("\n".join(lines) + "\n")


def stamp(row: int) -> str:
    """Row `row`'s timestamp: 5-minute rows from 2024-01-01 00:00."""
    minutes = 5 * row
    day, hour, minute = 1 + minutes // 1440, minutes // 60 % 24, minutes % 60
    return f"2024-01-{day:02d} {hour:02d}:{minute:02d}:00"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> pathlib.Path:
    """Two daily-seasonal series with a spike and a dip, one of whole counts
    and one of fractions (scaled by the benchmark), and their windows."""
    folder = tmp_path_factory.mktemp("labelled")
    rng = random.Random(3)
    counts = [
        round(200 + 80 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 12))
        for i in range(ROWS)
    ]
    for i in range(400, 412):
        counts[i] *= 3
    fractions = [
        round(2.5 + math.sin(i / 40) + rng.gauss(0, 0.1), 3) for i in range(ROWS)
    ]
    for i in range(450, 470):
        fractions[i] = 0.2
    write_series(folder, "cat/counts.csv", counts)
    write_series(folder, "cat/fractions.csv", fractions)
    windows = {
        "cat/counts.csv": [[stamp(380), stamp(430)]],
        "cat/fractions.csv": [[stamp(430), stamp(490)]],
    }
    (folder / "windows.json").write_text(json.dumps(windows))
    return folder


@pytest.mark.slow
def test_in_process_replay_gives_the_jobs_scores_and_alerts(folder, tmp_path):
    benchmark = load_benchmark()
    job = benchmark.run_all(load_folder(folder), tmp_path)
    replayed = benchmark.run_in_process(load_folder(folder), [])
    assert job.keys() == replayed.keys()
    assert any(alerts for _, _, _, alerts in job.values())
    for name, (_, bucket_s, scores, alerts) in job.items():
        _, replay_bucket_s, replay_scores, replay_alerts = replayed[name]
        assert replay_bucket_s == bucket_s
        assert replay_alerts == alerts, name
        assert replay_scores == pytest.approx(scores, abs=1e-12), name


def test_in_process_overrides_reach_the_detector(folder):
    # A threshold no evidence can pass, with no lone window and no window
    # beyond the query's extremes opening an episode on its own, raises no
    # alert and scores lower.
    benchmark = load_benchmark()
    default = benchmark.run_in_process(load_folder(folder), [])
    deaf = benchmark.run_in_process(
        load_folder(folder),
        [
            "detector.threshold=1000000.0",
            "detector.lone_sigma=0.0",
            "detector.extreme_sigma=0.0",
        ],
    )
    assert any(alerts for _, _, _, alerts in default.values())
    assert not any(alerts for _, _, _, alerts in deaf.values())
    for name, (_, _, scores, _) in deaf.items():
        assert max(scores) < max(default[name][2])


def test_the_report_covers_any_folders_categories(folder, tmp_path):
    # A held-out set or a user's folder has categories of its own, and may
    # have series without labelled windows: each gets its rows, with no
    # published anchor, instead of a failure on the README's categories.
    benchmark = load_benchmark()
    mixed = tmp_path / "mixed"
    for name in ("cat/counts.csv", "cat/fractions.csv"):
        (mixed / name).parent.mkdir(parents=True, exist_ok=True)
        (mixed / name).write_text((folder / name).read_text())
    quiet = [200 + (i % 7) for i in range(ROWS)]
    quiet[500] = 5000
    write_series(mixed, "quiet/flat.csv", quiet)
    labels = json.loads((folder / "windows.json").read_text())
    labels["quiet/flat.csv"] = []
    (mixed / "windows.json").write_text(json.dumps(labels))

    results = benchmark.run_in_process(load_folder(mixed), [])
    lines = benchmark.report(results).splitlines()

    cat = next(line.split() for line in lines if line.startswith("cat "))
    # The naive baseline measured in the same run, and the alerts' gain.
    alerts_score, naive, gain = map(float, cat[2:5])
    assert gain == pytest.approx(alerts_score - naive, abs=0.11)
    assert cat[5:8] == ["-", "-", "-"]
    flat = next(line.split() for line in lines if "quiet/flat.csv" in line)
    alerts = len(results["quiet/flat.csv"][3])
    assert alerts > 0
    weeks = ROWS * 300 / (7 * 24 * 3600)
    assert float(flat[1]) == pytest.approx(alerts / weeks, abs=0.005)
    # NAB leaves the first 15 % of the rows unscored (90 of 600): the burst
    # at row 500 is after it.
    assert 500 in results["quiet/flat.csv"][3]
    assert int(flat[2]) == sum(1 for row in results["quiet/flat.csv"][3] if row >= 90)
    assert any(line.startswith("alerts per series per week on quiet") for line in lines)


def test_a_detector_that_never_fires_scores_zero_in_the_report(folder):
    # NAB's normalisation puts a detector that never fires at 0 by
    # definition: the report's alerts column must say so.
    benchmark = load_benchmark()
    deaf = benchmark.run_in_process(
        load_folder(folder),
        [
            "detector.threshold=1000000.0",
            "detector.lone_sigma=0.0",
            "detector.extreme_sigma=0.0",
        ],
    )
    row = next(
        line.split()
        for line in benchmark.report(deaf).splitlines()
        if line.startswith("cat ")
    )
    assert float(row[2]) == 0.0


def _hand_results(folder, alerts):
    """`run_in_process`'s shape with chosen alert rows and flat scores."""
    return {
        series.name: (series, 300, [0.0] * ROWS, alerts[series.name])
        for series in load_folder(folder)
    }


def _per_file_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()[1:]]


def test_the_per_file_report_counts_catches_false_alerts_and_nab_credit(folder):
    # 600 rows: a probation of 90. counts.csv's window is rows 380-430 (51
    # rows): an alert at 400 earns sigma(-31/51) / sigma(-1) = 0.92098 and
    # one at 100, before any window ends, costs 0.11. fractions.csv's window
    # (430-490) is missed: -1. The worst file comes first.
    benchmark = load_benchmark()
    results = _hand_results(
        folder, {"cat/counts.csv": [100, 400], "cat/fractions.csv": []}
    )
    rows = _per_file_rows(benchmark.per_file_report(results, folder))
    assert [row[0] for row in rows] == ["cat/fractions.csv", "cat/counts.csv"]
    assert rows[0][1:4] == ["1", "0", "0"] and float(rows[0][4]) == -1.0
    assert rows[1][1:4] == ["1", "1", "1"]
    assert float(rows[1][4]) == pytest.approx(0.92098 - 0.11, abs=0.005)


def test_the_per_file_report_sets_each_file_beside_a_reference_detector(folder):
    # A reference detector in the folder's layout that fires at row 385 of
    # counts.csv (credit sigma(-46/51) / sigma(-1) = 0.99154) and never on
    # fractions.csv: counts.csv is 0.18 behind it, fractions.csv level.
    benchmark = load_benchmark()
    for name, row in (("counts", 385), ("fractions", None)):
        path = folder / "reference-Toy" / "cat" / f"Toy_{name}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        scores = [0.9 if i == row else 0.1 for i in range(ROWS)]
        path.write_text(
            "timestamp,anomaly_score\n"
            + "".join(f"{stamp(i)},{s}\n" for i, s in enumerate(scores))
        )
    results = _hand_results(
        folder, {"cat/counts.csv": [100, 400], "cat/fractions.csv": []}
    )
    rows = _per_file_rows(benchmark.per_file_report(results, folder, ("Toy", 0.5)))
    assert [row[0] for row in rows] == ["cat/counts.csv", "cat/fractions.csv"]
    counts, fractions = rows
    assert counts[5:8] == ["1", "0", "0.99"]
    assert float(counts[8]) == pytest.approx(0.92098 - 0.11 - 0.99154, abs=0.01)
    assert fractions[5:7] == ["0", "0"] and float(fractions[8]) == 0.0


def test_a_reference_the_folder_lacks_is_a_clear_error(folder):
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARK),
            "--data",
            str(folder),
            "--in_process",
            "--per_file",
            "--reference",
            "Nobody=0.5",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "no reference-Nobody/ folder" in done.stderr


def test_a_file_the_reference_has_no_scores_for_is_shown_last_with_dashes(folder):
    benchmark = load_benchmark()
    path = folder / "reference-Half" / "cat" / "Half_counts.csv"
    path.parent.mkdir(parents=True)
    path.write_text(
        "timestamp,anomaly_score\n" + "".join(f"{stamp(i)},0.1\n" for i in range(ROWS))
    )
    results = _hand_results(
        folder, {"cat/counts.csv": [100, 400], "cat/fractions.csv": []}
    )
    rows = _per_file_rows(benchmark.per_file_report(results, folder, ("Half", 0.5)))
    assert [row[0] for row in rows] == ["cat/counts.csv", "cat/fractions.csv"]
    # counts.csv against a reference that never fires: 0.811 - (-1).
    assert float(rows[0][8]) == pytest.approx(0.92098 - 0.11 + 1.0, abs=0.005)
    assert rows[1][5:] == ["-", "-", "-", "-"]

"""`pipelines.report.write_report` on hand-made job outputs, and via the CLI."""

import base64
import json
import os
import subprocess
import sys

import pytest
from report_page import Page

from pipelines.report import write_report
from transforms.records.readers import to_json_dict
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    EpisodeStatus,
    WindowScore,
)

T0 = 1_767_571_200_000  # 2026-01-05 00:00 UTC
WINDOW = 300_000
WINDOWS = 24
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCRIPT = "<script>alert(1)</script>"


def score(query, window, actual=100, stddev=10.0, revision=0):
    start = T0 + window * WINDOW
    return WindowScore(
        query=query,
        window_start=start,
        window_end=start + WINDOW,
        actual=actual,
        expected=100.0,
        stddev=stddev,
        score=0.0,
        revision=revision,
    )


def alert(query, window, kind, actual, deviation):
    """An OPENED record: the episode's first window is its peak so far."""
    start = T0 + window * WINDOW
    return Anomaly(
        query=query,
        kind=kind,
        window_start=start,
        window_end=start + WINDOW,
        actual=actual,
        expected=100.0,
        score=0.6,
        status=EpisodeStatus.OPENED,
        episode_start=start,
        peak_window_start=start,
        peak_deviation=deviation,
        peak_actual=actual,
        peak_expected=100.0,
        duration_windows=1,
    )


def closed(opened, windows, peak_window, peak_actual, deviation):
    record = Anomaly()
    record.CopyFrom(opened)
    record.status = EpisodeStatus.CLOSED
    record.episode_end = opened.episode_start + windows * WINDOW
    record.window_end = record.episode_end
    record.duration_windows = windows
    record.peak_window_start = T0 + peak_window * WINDOW
    record.peak_actual = peak_actual
    record.peak_deviation = deviation
    return record


def write_jsonl(folder, name, messages):
    """As the pipeline's `WriteJsonLines` writes a single shard."""
    lines = [json.dumps(to_json_dict(m)) + "\n" for m in messages]
    (folder / f"{name}-00000-of-00001.jsonl").write_text("".join(lines))


def write_job(folder, anomalies, scores=None):
    """Scores: a steady day for every query, with the anomalies' counts."""
    if scores is None:
        actual = {(a.query, a.window_start): a.actual for a in anomalies}
        queries = sorted({a.query for a in anomalies} | {"quiet"})
        scores = [
            score(q, w, actual.get((q, T0 + w * WINDOW), 100))
            for q in queries
            for w in range(WINDOWS)
        ]
    write_jsonl(folder, "scores", scores)
    write_jsonl(folder, "anomalies", anomalies)


def report(folder, **kwargs):
    path = write_report(folder, WINDOW, **kwargs)
    assert path == folder / "report.html"
    return path.read_text(encoding="utf-8")


ALPHA = alert("alpha", 10, AnomalyKind.SPIKE, 160, deviation=6.0)
BETA = alert("beta", 12, AnomalyKind.DIP, 20, deviation=8.0)
# Records of one episode each; alpha's closed with a higher peak later on.
ANOMALIES = [
    ALPHA,
    closed(ALPHA, 3, peak_window=11, peak_actual=190, deviation=9.0),
    BETA,
    alert("alpha", 20, AnomalyKind.SPIKE, 150, deviation=5.0),
    alert(SCRIPT, 3, AnomalyKind.SPIKE, 150, deviation=7.0),
]


def test_one_row_and_plot_per_episode_strongest_first(tmp_path):
    write_job(tmp_path, ANOMALIES)
    page = Page(report(tmp_path))
    rows = [row for row in page.rows if row]
    # query, kind, start, end, windows, peak, peak actual, expected, deviation
    assert rows == [
        [
            "alpha",
            "SPIKE",
            "2026-01-05 00:50",
            "2026-01-05 01:05",
            "3",
            "2026-01-05 00:55",
            "190",
            "100.0",
            "9.0",
        ],
        [
            "beta",
            "DIP",
            "2026-01-05 01:00",
            "open",
            "-",
            "2026-01-05 01:00",
            "20",
            "100.0",
            "8.0",
        ],
        [
            SCRIPT,
            "SPIKE",
            "2026-01-05 00:15",
            "open",
            "-",
            "2026-01-05 00:15",
            "150",
            "100.0",
            "7.0",
        ],
        [
            "alpha",
            "SPIKE",
            "2026-01-05 01:40",
            "open",
            "-",
            "2026-01-05 01:40",
            "150",
            "100.0",
            "5.0",
        ],
    ]
    assert len(page.images) == 4
    for src in page.images:
        prefix, data = src.split(",", 1)
        assert prefix == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(PNG_SIGNATURE)
    text = "".join(page.text)
    assert "4 episodes (3 spikes, 1 dips; 3 still open) over 4 queries" in text
    assert "Queries with most episodes: alpha (2)" in text


def test_an_episode_summarised_at_the_end_of_the_input_is_still_open(tmp_path):
    # The job ended with beta's dip open: its summary (OPEN_AT_END) carries
    # the end of its last abnormal window, yet the episode never closed.
    at_end = closed(BETA, 2, peak_window=13, peak_actual=10, deviation=9.5)
    at_end.status = EpisodeStatus.OPEN_AT_END
    write_job(tmp_path, [ALPHA, closed(ALPHA, 3, 11, 190, 9.0), BETA, at_end])
    page = Page(report(tmp_path))
    rows = {row[0]: row for row in page.rows if row}
    assert rows["beta"][3:5] == ["2026-01-05 01:10 (open)", "2"]
    assert rows["alpha"][3] == "2026-01-05 01:05"
    text = "".join(page.text)
    assert "2 episodes (1 spikes, 1 dips; 1 still open)" in text


def test_top_limits_the_episodes(tmp_path):
    write_job(tmp_path, ANOMALIES)
    page = Page(report(tmp_path, top=2))
    assert [row[0] for row in page.rows if row] == ["alpha", "beta"]
    assert len(page.images) == 2


def test_query_text_is_html_escaped(tmp_path):
    write_job(tmp_path, ANOMALIES)
    text = report(tmp_path)
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_records_from_before_episodes_read_as_one_window_episodes(tmp_path):
    old = Anomaly(
        query="alpha",
        kind=AnomalyKind.SPIKE,
        window_start=T0 + 4 * WINDOW,
        window_end=T0 + 5 * WINDOW,
        actual=180,
        expected=100.0,
        score=1.0,
    )
    write_job(tmp_path, [old])
    rows = [row for row in Page(report(tmp_path)).rows if row]
    assert [row[:7] for row in rows] == [
        [
            "alpha",
            "SPIKE",
            "2026-01-05 00:20",
            "2026-01-05 00:25",
            "1",
            "2026-01-05 00:20",
            "180",
        ]
    ]


# Without scores a plot has only the episode's shading: no warning of an
# empty legend on the user's console.
@pytest.mark.filterwarnings("error::UserWarning")
def test_episodes_without_scores_are_still_reported(tmp_path):
    write_job(tmp_path, ANOMALIES[:2], scores=[])
    page = Page(report(tmp_path))
    assert [row[0] for row in page.rows if row] == ["alpha"]
    assert len(page.images) == 1


@pytest.mark.parametrize("with_scores", [True, False])
def test_no_anomalies_says_so(tmp_path, with_scores):
    if with_scores:
        write_job(tmp_path, [], [score("alpha", w) for w in range(WINDOWS)])
    text = report(tmp_path)
    assert text.startswith("<!DOCTYPE html>")
    assert text.rstrip().endswith("</html>")
    assert "No anomalies were detected." in text
    assert "<img" not in text and "<table" not in text
    page = Page(text)
    assert page.rows == [] and page.images == []


@pytest.mark.slow
def test_cli_writes_a_report_on_the_anomalous_queries(tmp_path):
    # Seed 2 injects spikes and dips into this small day; the default seed
    # happens to inject none into 6 queries.
    args = ["--output", str(tmp_path), "--num_queries", "6", "--days", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.zeitgeist", *args, "--seed", "2", "--report"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "report.html").exists()
    # One file per bundle of the writing stage: read them all.
    lines = [
        line
        for path in tmp_path.glob("anomalies*.jsonl")
        for line in path.read_text().splitlines()
    ]
    queries = {json.loads(line)["query"] for line in lines if line}
    assert queries, "seed 2 has injected episodes"
    page = Page((tmp_path / "report.html").read_text(encoding="utf-8"))
    # Fewer episodes than the default top 20: every one is shown.
    assert {row[0] for row in page.rows if row} == queries
    assert len(page.images) == len([r for r in page.rows if r])


def test_an_episode_open_at_the_end_of_the_input_shows_its_end_so_far(tmp_path):
    summary = closed(ALPHA, 4, peak_window=12, peak_actual=200, deviation=9.5)
    summary.status = EpisodeStatus.OPEN_AT_END
    write_job(tmp_path, [ALPHA, summary])
    rows = [row for row in Page(report(tmp_path)).rows if row]
    assert [row[:7] for row in rows] == [
        [
            "alpha",
            "SPIKE",
            "2026-01-05 00:50",
            "2026-01-05 01:10 (open)",
            "4",
            "2026-01-05 01:00",
            "200",
        ]
    ]

"""`pipelines.report.write_report` on hand-made job outputs, and via the CLI."""

import base64
import json
import os
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from pipelines.report import write_report
from transforms.records.readers import to_json_dict
from transforms.records.zeitgeist_pb2 import Anomaly, AnomalyKind, WindowScore

T0 = 1_767_571_200_000  # 2026-01-05 00:00 UTC
WINDOW = 300_000
WINDOWS = 24
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCRIPT = "<script>alert(1)</script>"


class Page(HTMLParser):
    """What a reader sees: table rows, plot headings and image sources."""

    def __init__(self, text: str):
        super().__init__()
        self.rows: list[list[str]] = []
        self.headings: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []
        self._tag = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._tag = tag
        if tag == "tr":
            self.rows.append([])
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)
        if self._tag == "td":
            self.rows[-1].append(data)
        elif self._tag == "h3":
            self.headings.append(data)

    def handle_endtag(self, tag):
        self._tag = ""


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


def anomaly(query, window, kind, actual, score=1.0, revision=0):
    start = T0 + window * WINDOW
    return Anomaly(
        query=query,
        kind=kind,
        window_start=start,
        window_end=start + WINDOW,
        actual=actual,
        expected=100.0,
        score=score,
        revision=revision,
    )


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


# Strength: (score, |actual - expected| / stddev) with expected 100, stddev 10.
ANOMALIES = [
    anomaly("gamma", 5, AnomalyKind.SPIKE, 300, score=0.9),  # 0.9, 20 sigma
    anomaly("alpha", 10, AnomalyKind.SPIKE, 160),  # 1.0, 6
    anomaly("alpha", 11, AnomalyKind.SPIKE, 130, score=0.5),  # 0.5, 3
    anomaly(SCRIPT, 3, AnomalyKind.SPIKE, 150),  # 1.0, 5
    anomaly("beta", 12, AnomalyKind.DIP, 20),  # 1.0, 8
]


def test_ranks_anomalies_and_plots_each_top_query(tmp_path):
    write_job(tmp_path, ANOMALIES)
    page = Page(report(tmp_path))
    assert [row[:3] for row in page.rows if row] == [
        ["beta", "DIP", "2026-01-05 01:00"],
        ["alpha", "SPIKE", "2026-01-05 00:50"],
        [SCRIPT, "SPIKE", "2026-01-05 00:15"],
        ["gamma", "SPIKE", "2026-01-05 00:25"],
        ["alpha", "SPIKE", "2026-01-05 00:55"],
    ]
    # actual, expected, stddevs, score of the strongest.
    assert page.rows[1][3:] == ["20", "100.0", "8.0", "1.00"]
    assert page.headings == ["beta", "alpha", SCRIPT, "gamma"]
    assert len(page.images) == 4
    for src in page.images:
        prefix, data = src.split(",", 1)
        assert prefix == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(PNG_SIGNATURE)
    text = "".join(page.text)
    assert "5 queries, 120 windows, 4 spikes, 1 dips" in text
    assert "How to read this" in text


def test_top_limits_the_queries_and_their_rows(tmp_path):
    write_job(tmp_path, ANOMALIES)
    page = Page(report(tmp_path, top=2))
    assert page.headings == ["beta", "alpha"]
    assert len(page.images) == 2
    assert [row[0] for row in page.rows if row] == ["beta", "alpha", "alpha"]


def test_query_text_is_html_escaped(tmp_path):
    write_job(tmp_path, ANOMALIES)
    text = report(tmp_path)
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_latest_revision_of_each_window_wins(tmp_path):
    scores = [score("alpha", w) for w in range(WINDOWS)]
    scores += [score("alpha", 4, actual=180, revision=1)]
    scores += [score("alpha", 9, actual=105, revision=1)]
    write_job(
        tmp_path,
        [
            anomaly("alpha", 4, AnomalyKind.SPIKE, 150),
            anomaly("alpha", 4, AnomalyKind.SPIKE, 180, revision=1),
            # Corrected back to normal: the score's revision 1 clears it.
            anomaly("alpha", 9, AnomalyKind.SPIKE, 170),
        ],
        scores,
    )
    page = Page(report(tmp_path))
    assert [row[:4] for row in page.rows if row] == [
        ["alpha", "SPIKE", "2026-01-05 00:20", "180"]
    ]
    assert "1 queries, 24 windows, 1 spikes, 0 dips" in "".join(page.text)


def test_anomalies_without_scores_are_still_reported(tmp_path):
    write_job(tmp_path, ANOMALIES[:2], scores=[])
    page = Page(report(tmp_path))
    assert page.headings == ["alpha", "gamma"]
    assert [row[5] for row in page.rows if row] == ["0.0", "0.0"]


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
    lines = (tmp_path / "anomalies-00000-of-00001.jsonl").read_text().splitlines()
    queries = {json.loads(line)["query"] for line in lines if line}
    assert queries, "seed 2 has injected episodes"
    page = Page((tmp_path / "report.html").read_text(encoding="utf-8"))
    # Six queries are under the default top 10: every anomalous one is shown.
    assert set(page.headings) == queries
    assert len(page.images) == len(queries)

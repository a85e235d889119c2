"""`write_report`: one HTML page on a finished Zeitgeist job's top anomalies.

It reads back what `python -m pipelines.zeitgeist --report` wrote to OUTPUT
(`scores*.jsonl` and `anomalies*.jsonl`) and writes OUTPUT/report.html. The
page is self-contained (plots are base64 PNGs drawn with matplotlib's Agg
canvas), so it can be attached to a ticket or mailed as is.

Late corrections re-emit a window with a higher revision, so only the latest
revision of each (query, window) counts. A correction can also clear an
anomaly: an anomaly whose window has a newer score than itself is dropped.
"""

import base64
import html
import io
import math
import pathlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from pipelines.outputs import read_output
from transforms.records.zeitgeist_pb2 import Anomaly, AnomalyKind, WindowScore

R = TypeVar("R", Anomaly, WindowScore)
REPORT_NAME = "report.html"
# Both names are the `Zeitgeist` transform's output tags, as the CLI's sinks.
_SCORES = "scores"
_ANOMALIES = "anomalies"
_BAND_SIGMAS = 3
_MARKERS = {
    AnomalyKind.SPIKE: ("^", "red", "spike"),
    AnomalyKind.DIP: ("v", "blue", "dip"),
}
_COLUMNS = (
    "query",
    "kind",
    "window start (UTC)",
    "actual",
    "expected",
    "stddevs",
    "score",
)
_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:1em auto;color:#222}"
    "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
    "td.n{text-align:right}img{max-width:100%}"
)


@dataclass(frozen=True)
class _Ranked:
    """A current anomaly with its deviation in standard deviations.

    `sigmas` is |actual - expected| / stddev of the window's score, or 0.0
    when the window has no score (e.g. the job ran without scores).
    """

    anomaly: Anomaly
    sigmas: float


def write_report(output: pathlib.Path, window_ms: int, top: int = 10) -> pathlib.Path:
    """Write `output`/report.html on the `top` queries; return its path.

    Queries are ranked by their strongest anomaly, ordered by score, then by
    |actual - expected| / stddev. Each gets a plot of its window counts with
    the model's expectation, a band of ±3 stddev, and its spikes and dips.
    `window_ms` is the job's window size: windows further apart than that
    are gaps in a query's traffic, and the plots break their lines there.
    """
    scores = _latest(read_output(output, _SCORES, WindowScore))
    anomalies = [
        a
        for key, a in _latest(read_output(output, _ANOMALIES, Anomaly)).items()
        if key not in scores or scores[key].revision <= a.revision
    ]
    ranked = _rank(anomalies, scores)
    queries = list(dict.fromkeys(r.anomaly.query for r in ranked))[:top]
    rows = [r for r in ranked if r.anomaly.query in queries]
    plots = [(q, _plot(q, scores, anomalies, window_ms)) for q in queries]
    totals = {
        "queries": len({q for q, _ in scores} | {a.query for a in anomalies}),
        "windows": len(scores),
        "spikes": sum(a.kind == AnomalyKind.SPIKE for a in anomalies),
        "dips": sum(a.kind == AnomalyKind.DIP for a in anomalies),
    }
    path = output / REPORT_NAME
    path.write_text(_page(totals, window_ms, rows, plots), encoding="utf-8")
    return path


def _latest(records: Iterable[R]) -> dict[tuple[str, int], R]:
    """The highest revision of each (query, window_start)."""
    latest: dict[tuple[str, int], R] = {}
    for record in records:
        key = (record.query, record.window_start)
        if key not in latest or record.revision > latest[key].revision:
            latest[key] = record
    return latest


def _rank(
    anomalies: Iterable[Anomaly], scores: dict[tuple[str, int], WindowScore]
) -> list[_Ranked]:
    """Strongest first: score, then sigmas; query and time make ties stable."""
    ranked = [
        _Ranked(a, _sigmas(a, scores.get((a.query, a.window_start)))) for a in anomalies
    ]
    return sorted(ranked, key=_strength)


def _strength(r: _Ranked) -> tuple[float, float, str, int]:
    return (-r.anomaly.score, -r.sigmas, r.anomaly.query, r.anomaly.window_start)


def _sigmas(anomaly: Anomaly, score: WindowScore | None) -> float:
    if score is None:
        return 0.0
    deviation = abs(anomaly.actual - anomaly.expected)
    if score.stddev > 0:
        return deviation / score.stddev
    # A model with no variance yet: any deviation is infinitely unlikely.
    return math.inf if deviation else 0.0


def _plot(
    query: str,
    scores: dict[tuple[str, int], WindowScore],
    anomalies: Sequence[Anomaly],
    window_ms: int,
) -> str:
    """`query`'s PNG, base64: counts, expected ±3 stddev, spikes and dips."""
    own = [s for (q, _), s in sorted(scores.items()) if q == query]
    figure = Figure(figsize=(8, 2.8), dpi=90)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    starts, actual, expected, stddev = _series(own, window_ms)
    axes.plot(starts, actual, color="black", linewidth=1, label="searches")
    axes.plot(
        starts, expected, color="grey", linewidth=1, linestyle="--", label="expected"
    )
    axes.fill_between(
        starts,
        expected - _BAND_SIGMAS * stddev,
        expected + _BAND_SIGMAS * stddev,
        color="grey",
        alpha=0.25,
        label=f"expected ± {_BAND_SIGMAS} stddev",
    )
    for kind, (marker, color, label) in _MARKERS.items():
        hits = [a for a in anomalies if a.query == query and a.kind == kind]
        if hits:
            axes.scatter(
                _utc([a.window_start for a in hits]),
                [a.actual for a in hits],
                marker=marker,
                color=color,
                zorder=3,
                label=f"{label}s",
            )
    locator = AutoDateLocator(tz="UTC")
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz="UTC"))
    axes.set_xlabel("window start (UTC)")
    axes.set_ylabel("searches per window")
    # Above the axes, so that it never hides the data.
    axes.legend(
        loc="lower left",
        bbox_to_anchor=(0, 1),
        ncols=4,
        frameon=False,
        fontsize="small",
    )
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return base64.b64encode(png.getvalue()).decode("ascii")


def _series(
    scores: Sequence[WindowScore], window_ms: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Window starts (UTC) and actual, expected, stddev values, by window.

    A NaN row is put one window after each run of windows that stops short
    of the next one: the query went quiet and emitted nothing, which a line
    drawn straight across would hide. Windows without a prediction (the
    model's first) have NaN expected and stddev.
    """
    starts = np.array([s.window_start for s in scores], dtype=np.int64)
    values = np.array([(s.actual, s.expected, s.stddev) for s in scores], dtype=float)
    values = values.reshape(-1, 3)
    # Before the model's first window there is no prediction to draw.
    unpredicted = np.array([s.history == 0 for s in scores], dtype=bool)
    values[unpredicted, 1:] = np.nan
    gaps = np.flatnonzero(np.diff(starts) > window_ms) + 1
    starts = np.insert(starts, gaps, starts[gaps - 1] + window_ms)
    values = np.insert(values, gaps, np.nan, axis=0)
    return _utc(starts), values[:, 0], values[:, 1], values[:, 2]


def _utc(epoch_ms: Sequence[int] | np.ndarray) -> np.ndarray:
    # Naive datetime64 is UTC to matplotlib, whatever the local time zone.
    return np.asarray(epoch_ms, dtype=np.int64).astype("datetime64[ms]")


def _page(
    totals: dict[str, int],
    window_ms: int,
    rows: Sequence[_Ranked],
    plots: Sequence[tuple[str, str]],
) -> str:
    summary = ", ".join(f"{n} {name}" for name, n in totals.items())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Zeitgeist report</title><style>{_STYLE}</style></head><body>",
        "<h1>Zeitgeist report</h1>",
        f"<p>{summary} ({window_ms / 60_000:g}-minute windows).</p>",
        "<h2>How to read this</h2>",
        "<p>Each plot shows one query's searches per window (black), the count "
        "the model expected from earlier windows only (dashed) and a grey band "
        f"of ±{_BAND_SIGMAS} standard deviations around it. Red upward "
        "triangles mark spikes, blue downward triangles dips. A single window "
        "outside the band is not an anomaly by itself: the detector "
        "accumulates confidence over consecutive windows, and the score is "
        "that confidence relative to the threshold (1 = at or past it). "
        "Queries are ranked by their strongest anomaly: score, then distance "
        "from the expected count in standard deviations. Times are UTC.</p>",
    ]
    if not rows:
        parts.append("<p>No anomalies were detected.</p>")
    else:
        parts += [f"<h2>Anomalies of the top {len(plots)} queries</h2>", _table(rows)]
        for query, png in plots:
            name = html.escape(query)
            parts.append(
                f'<h3>{name}</h3><img alt="window counts of {name}" '
                f'src="data:image/png;base64,{png}">'
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(rows: Sequence[_Ranked]) -> str:
    header = "".join(f"<th>{h}</th>" for h in _COLUMNS)
    lines = [f"<table><tr>{header}</tr>"]
    for row in rows:
        a = row.anomaly
        start = datetime.fromtimestamp(a.window_start / 1000, tz=UTC)
        cells = (
            f"<td>{html.escape(a.query)}</td>"
            f"<td>{AnomalyKind.Name(a.kind)}</td>"
            f"<td>{start:%Y-%m-%d %H:%M}</td>"
            f'<td class="n">{a.actual}</td>'
            f'<td class="n">{a.expected:.1f}</td>'
            f'<td class="n">{row.sigmas:.1f}</td>'
            f'<td class="n">{a.score:.2f}</td>'
        )
        lines.append(f"<tr>{cells}</tr>")
    lines.append("</table>")
    return "\n".join(lines)

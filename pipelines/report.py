"""`write_report`: one HTML page on a finished Zeitgeist job's episodes.

It reads back what `python -m pipelines.zeitgeist --report` wrote to OUTPUT
(`scores*.jsonl` and `anomalies*.jsonl`) and writes OUTPUT/report.html: a
summary (episodes by kind, the queries with most), then one row per episode,
strongest first, each with a plot of its query around it. The page is
self-contained (plots are base64 PNGs drawn with matplotlib's Agg canvas),
so it can be attached to a ticket or mailed as is.

An episode is what the detector's records say about it (see
`transforms.zeitgeist.episodes`): its `OPENED` alert and, once over, its
`CLOSED` summary; an `AMENDED` record is a one-window episode of its own.
Records written before episodes existed (no status) are read as one-window
episodes. Late corrections re-emit a window's score with a higher revision:
only the latest revision of each (query, window) is plotted.
"""

import base64
import html
import io
import pathlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from pipelines.outputs import REPORT_NAME, read_output
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    EpisodeStatus,
    WindowScore,
)

# Both names are the `Zeitgeist` transform's output tags, as the CLI's sinks.
_SCORES = "scores"
_ANOMALIES = "anomalies"
_BAND_SIGMAS = 3
# Windows of context plotted on each side of an episode.
_CONTEXT_WINDOWS = 36
_COLOURS = {AnomalyKind.SPIKE: "red", AnomalyKind.DIP: "blue"}
_COLUMNS = (
    "query",
    "kind",
    "start (UTC)",
    "end (UTC)",
    "windows",
    "peak (UTC)",
    "peak actual",
    "peak expected",
    "peak deviation",
)
_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:1em auto;color:#222}"
    "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
    "td.n{text-align:right}img{max-width:100%}"
)


@dataclass(frozen=True)
class Episode:
    """One episode as its records describe it.

    `still_open` when the job ended with the episode open: its records are
    the alert alone (`end_ms` None), or the summary written at the end of
    the input (`OPEN_AT_END`, `end_ms` the end of its last abnormal window).
    """

    query: str
    kind: int
    start_ms: int
    end_ms: int | None
    still_open: bool
    peak_ms: int
    peak_actual: int
    peak_expected: float
    peak_deviation: float
    duration_windows: int | None


def write_report(output: pathlib.Path, window_ms: int, top: int = 20) -> pathlib.Path:
    """Write `output`/report.html on the `top` strongest episodes; return it.

    Episodes are ranked by their peak deviation (in the query's spreads of
    noise), then query and start. `window_ms` is the job's window size:
    windows further apart than that are gaps in a query's traffic, and the
    plots break their lines there.
    """
    scores = _latest_scores(read_output(output, _SCORES, WindowScore))
    episodes = episodes_of(read_output(output, _ANOMALIES, Anomaly))
    ranked = sorted(episodes, key=lambda e: (-e.peak_deviation, e.query, e.start_ms))
    shown = ranked[:top]
    plots = [_plot(e, scores.get(e.query, []), window_ms) for e in shown]
    path = output / REPORT_NAME
    page = _page(episodes, len(scores), window_ms, shown, plots)
    path.write_text(page, encoding="utf-8")
    return path


# Records that end an episode, and those of them that come after its alert.
_SUMMARIES = (EpisodeStatus.CLOSED, EpisodeStatus.AMENDED, EpisodeStatus.OPEN_AT_END)
_FINAL = (EpisodeStatus.CLOSED, EpisodeStatus.OPEN_AT_END)
# Records of an episode the job ended with open.
_OPEN = (EpisodeStatus.OPENED, EpisodeStatus.OPEN_AT_END)


def episodes_of(records: Iterable[Anomaly]) -> list[Episode]:
    """The episodes that anomaly records describe, one per (query, kind, start).

    A `CLOSED` (or `OPEN_AT_END`) record, when there is one, is the final
    word on its episode.
    """
    found: dict[tuple[str, int, int], Episode] = {}
    for record in sorted(records, key=lambda r: r.status in _FINAL):
        start = record.episode_start if record.status else record.window_start
        closes = record.status in _SUMMARIES
        if record.status == EpisodeStatus.EPISODE_STATUS_UNSPECIFIED:
            end = record.window_end
        else:
            end = record.episode_end if closes else None
        found[(record.query, record.kind, start)] = Episode(
            query=record.query,
            kind=record.kind,
            start_ms=start,
            end_ms=end,
            still_open=record.status in _OPEN,
            peak_ms=record.peak_window_start or record.window_start,
            peak_actual=record.peak_actual if record.status else record.actual,
            peak_expected=record.peak_expected if record.status else record.expected,
            peak_deviation=record.peak_deviation,
            duration_windows=_duration(record),
        )
    return list(found.values())


def _duration(record: Anomaly) -> int | None:
    if record.status == EpisodeStatus.OPENED:
        return None
    return record.duration_windows or 1


def _latest_scores(records: Iterable[WindowScore]) -> dict[str, list[WindowScore]]:
    """Per query, the highest revision of each window, in window order."""
    latest: dict[tuple[str, int], WindowScore] = {}
    for record in records:
        key = (record.query, record.window_start)
        if key not in latest or record.revision > latest[key].revision:
            latest[key] = record
    by_query: dict[str, list[WindowScore]] = {}
    for (query, _), record in sorted(latest.items()):
        by_query.setdefault(query, []).append(record)
    return by_query


def _plot(episode: Episode, scores: Sequence[WindowScore], window_ms: int) -> str:
    """The episode's PNG, base64: its query's counts around it, the expected
    band (clipped at zero) and the episode shaded."""
    end = episode.end_ms if episode.end_ms is not None else episode.peak_ms + window_ms
    low = episode.start_ms - _CONTEXT_WINDOWS * window_ms
    high = end + _CONTEXT_WINDOWS * window_ms
    near = [s for s in scores if low <= s.window_start < high]
    figure = Figure(figsize=(8, 2.6), dpi=80)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colour = _COLOURS.get(episode.kind, "orange")
    # Labelled so that the legend always has an entry, scores or none.
    axes.axvspan(
        *_utc([episode.start_ms, end]), color=colour, alpha=0.15, label="episode"
    )
    if near:
        starts, actual, expected, stddev = _series(near, window_ms)
        axes.plot(starts, actual, color="black", linewidth=1, label="searches")
        axes.plot(starts, expected, color="grey", linestyle="--", label="expected")
        axes.fill_between(
            starts,
            np.maximum(expected - _BAND_SIGMAS * stddev, 0.0),
            expected + _BAND_SIGMAS * stddev,
            color="grey",
            alpha=0.25,
            label=f"expected ± {_BAND_SIGMAS} stddev",
        )
    locator = AutoDateLocator(tz="UTC")
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz="UTC"))
    axes.set_ylabel("searches per window")
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
    episodes: Sequence[Episode],
    queries: int,
    window_ms: int,
    shown: Sequence[Episode],
    plots: Sequence[str],
) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Zeitgeist report</title><style>{_STYLE}</style></head><body>",
        "<h1>Zeitgeist report</h1>",
        _summary(episodes, queries, window_ms),
        "<h2>How to read this</h2>",
        "<p>An episode opens (the alert) when the evidence that a query is "
        "spiking or dipping first passes the threshold, and closes when the "
        "query has been back to normal for a while. Each row is one episode; "
        "its plot shows the query's searches per window (black) around it, the "
        "count the model expected from earlier windows only (dashed) with a "
        f"grey band of ±{_BAND_SIGMAS} standard deviations (clipped at zero), "
        "and the episode shaded (red: spike, blue: dip). The peak deviation "
        "is in the query's own spreads of noise, learned from its traffic. "
        "Times are UTC; an episode still open when the job ended is marked "
        "open, with its end so far (its last abnormal window) when known.</p>",
    ]
    if not shown:
        parts.append("<p>No anomalies were detected.</p>")
    else:
        parts.append(f"<h2>The {len(shown)} strongest episodes</h2>")
        for episode, png in zip(shown, plots, strict=True):
            name = html.escape(episode.query)
            parts.append(_table([episode]))
            parts.append(
                f'<img alt="searches for {name} around the episode" '
                f'src="data:image/png;base64,{png}">'
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _summary(episodes: Sequence[Episode], queries: int, window_ms: int) -> str:
    kinds = Counter(AnomalyKind.Name(e.kind).lower() for e in episodes)
    still_open = sum(e.still_open for e in episodes)
    counts = ", ".join(f"{kinds[k]} {k}s" for k in ("spike", "dip"))
    busiest = Counter(e.query for e in episodes).most_common(5)
    top = ", ".join(f"{html.escape(q)} ({n})" for q, n in busiest) or "none"
    return (
        f"<p>{len(episodes)} episodes ({counts}; {still_open} still open) over "
        f"{queries} queries with scores, {window_ms / 60_000:g}-minute windows.</p>"
        f"<p>Queries with most episodes: {top}.</p>"
    )


def _table(episodes: Sequence[Episode]) -> str:
    header = "".join(f"<th>{h}</th>" for h in _COLUMNS)
    lines = [f"<table><tr>{header}</tr>"]
    for e in episodes:
        cells = (
            f"<td>{html.escape(e.query)}</td>"
            f"<td>{AnomalyKind.Name(e.kind)}</td>"
            f"<td>{_time(e.start_ms)}</td>"
            f"<td>{_end(e)}</td>"
            f'<td class="n">{e.duration_windows or "-"}</td>'
            f"<td>{_time(e.peak_ms)}</td>"
            f'<td class="n">{e.peak_actual}</td>'
            f'<td class="n">{e.peak_expected:.1f}</td>'
            f'<td class="n">{e.peak_deviation:.1f}</td>'
        )
        lines.append(f"<tr>{cells}</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _end(episode: Episode) -> str:
    if episode.end_ms is None:
        return "open"
    end = _time(episode.end_ms)
    return f"{end} (open)" if episode.still_open else end


def _time(epoch_ms: int) -> str:
    return f"{datetime.fromtimestamp(epoch_ms / 1000, tz=UTC):%Y-%m-%d %H:%M}"

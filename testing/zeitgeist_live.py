"""A generated Zeitgeist stream played in real time, for live demos and the
latency benchmark.

`live_stream(rate, ...)` generates a stream (`testing.zeitgeist_generator`)
that starts at the current window, with the most popular query's rate
chosen so that all queries together make about `rate` searches a second,
and episodes frequent enough to be seen in minutes. `LivePlayer` then plays
it into a directory (`stream_feed`, `testing.live_player`). So event time
is the wall clock, give or take the stream's disorder, and a followed
directory (`transforms.records.follow`) sees what a live feed would send.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np

from testing.live_player import Feed
from testing.zeitgeist_generator import (
    DAY_MS,
    Episode,
    GeneratedStream,
    StreamSpec,
    generate,
)

# Episodes per query per window, and windows of warm-up before the first: a
# live run of a few hundred windows sees several episodes per query.
_EPISODES_PER_QUERY_WINDOW = 1 / 150
_WARMUP_WINDOWS = 24
_MAX_OUT_OF_ORDER_MS = 1_000


def _base_rate(total_per_window: float, num_queries: int, min_rate: float) -> float:
    """The top query's rate per window for which the Zipf law of the
    generator (rank r gets base / r, at least `min_rate`) sums to
    `total_per_window`."""
    ranks = np.arange(1, num_queries + 1)
    low, high = 0.0, total_per_window
    for _ in range(60):
        middle = (low + high) / 2
        if np.maximum(middle / ranks, min_rate).sum() < total_per_window:
            low = middle
        else:
            high = middle
    return high


def live_stream(
    rate: float,
    window_ms: int,
    minutes: float,
    num_queries: int,
    seed: int,
    now_ms: int | None = None,
    warmup_windows: int = _WARMUP_WINDOWS,
) -> GeneratedStream:
    """A stream of about `rate` searches a second for `minutes`, from the
    window holding `now_ms` (the wall clock by default), with up to a second
    of disorder and no late records; episodes start after `warmup_windows`."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    windows = max(1, round(minutes * 60_000 / window_ms))
    min_rate = 0.5
    total = rate * window_ms / 1000
    if total < num_queries * min_rate:
        raise ValueError(
            f"rate {rate}/s is too low for {num_queries} queries in "
            f"{window_ms / 1000:g} s windows"
        )
    spec = StreamSpec(
        num_queries=num_queries,
        start_ms=now_ms - now_ms % window_ms,
        duration_ms=windows * window_ms,
        window_ms=window_ms,
        base_rate=_base_rate(total, num_queries, min_rate),
        min_rate=min_rate,
        episodes_per_query_day=_EPISODES_PER_QUERY_WINDOW * DAY_MS / window_ms,
        warmup_ms=warmup_windows * window_ms,
        # Minutes long: a day's season or drift would not show.
        seasonality=0.0,
        drift_per_day=0.0,
        out_of_order_fraction=0.05,
        max_out_of_order_ms=min(_MAX_OUT_OF_ORDER_MS, window_ms),
        watermark_lag_ms=min(_MAX_OUT_OF_ORDER_MS, window_ms),
    )
    return generate(spec, seed)


def stream_feed(stream: GeneratedStream, directory: pathlib.Path) -> Feed:
    """`stream` as a feed of `directory`, for a `LivePlayer`."""
    return Feed(directory, stream.arrival_ms, stream.write_jsonl)


def episodes_played(stream: GeneratedStream, through_ms: int) -> list[Episode]:
    """The episodes of `stream` whose every window was played by `through_ms`."""
    return [e for e in stream.episodes if e.end_ms <= through_ms]

"""Synthetic Zeitgeist search stream with injected spikes and dips as ground truth.

Traffic is simulated per (query, window) cell. The expected count of a cell is

    rate(query) * daily_seasonality(query, t) * drift(query, t) [+/- episode]

where rates follow a Zipf law over query popularity. The realised count is
Poisson(expected), so one standard deviation of a window count is
sqrt(expected). Episodes shift the expected count by a number of those
standard deviations for a few consecutive windows: a spike adds, a dip removes.

Each count becomes individual `SearchQuery` events with uniform event times
inside the window, or one pre-aggregated record (`count=N`, stamped with the
window start). Records then get an *arrival* time, which is their event time
plus a delay:

* on time: no delay, so arrival order is event-time order;
* out of order: up to `max_out_of_order_ms`, never more than the watermark lag;
* late: within `late_delay_ms`, always more than the watermark lag, so the
  record arrives behind a watermark trailing arrivals by `watermark_lag_ms`;
* duplicates: a copy of a record (same record id) that arrives at or after the
  original, on time exactly when the original is.

Everything is drawn from numpy generators seeded by `seed`, with independent
streams for traffic, episodes, counts, event times and arrivals, so the same
spec and seed always give the same stream, and `spec.quiet()` with the same
seed keeps the same baseline traffic.

This module is the entry point: `generate` draws the random streams and
hands them to the parts, each one concept: `zeitgeist_spec` (what to
simulate), `zeitgeist_traffic` (expected counts and episodes),
`zeitgeist_arrivals` (records and their arrival times) and `zeitgeist_stream`
(the result, its ground truth and writers). Their public names are
re-exported here, so callers need only this module.
"""

from __future__ import annotations

import numpy as np

from testing.zeitgeist_arrivals import arrivals, cell_records
from testing.zeitgeist_spec import (
    DAY_MS,
    DEFAULT_START_MS,
    HOUR_MS,
    MINUTE_MS,
    StreamSpec,
)
from testing.zeitgeist_stream import (
    DIP,
    SPIKE,
    Episode,
    GeneratedStream,
    load_episodes,
    write_episodes,
)
from testing.zeitgeist_traffic import expected_baseline, inject_episodes

__all__ = [
    "DAY_MS",
    "DEFAULT_START_MS",
    "DIP",
    "HOUR_MS",
    "MINUTE_MS",
    "SPIKE",
    "Episode",
    "GeneratedStream",
    "StreamSpec",
    "generate",
    "load_episodes",
    "write_episodes",
]


def generate(spec: StreamSpec, seed: int) -> GeneratedStream:
    """Simulate `spec` deterministically from `seed`."""
    traffic, placement, poisson, timing, arrival = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(5)
    )
    width = len(str(spec.num_queries - 1))
    names = tuple(f"q{rank:0{width}d}" for rank in range(spec.num_queries))
    baseline = expected_baseline(spec, traffic)
    episodes, expected = inject_episodes(spec, baseline, names, placement)
    counts = poisson.poisson(expected)
    query, event_time, cell_count = cell_records(spec, counts, timing)
    order, source, duplicate, arrival_ms = arrivals(spec, event_time, arrival)
    return GeneratedStream(
        spec=spec,
        seed=seed,
        query_names=names,
        episodes=tuple(episodes),
        baseline_counts=baseline,
        expected_counts=expected,
        counts=counts,
        query_index=query[source][order],
        event_time_ms=event_time[source][order],
        record_index=source[order],
        count=cell_count[source][order],
        arrival_ms=arrival_ms[order],
        is_duplicate=duplicate[order],
    )

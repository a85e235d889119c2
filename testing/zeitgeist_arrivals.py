"""Records from per-cell counts, and when each arrives: disorder, late, duplicates.

Separate from the traffic model because arrival is what a streaming
pipeline sees and the counts are what it must recover: the same counts can
be replayed in order or with out-of-order, late and duplicate records, and
the ground truth does not move.
"""

from __future__ import annotations

import numpy as np

from testing.zeitgeist_spec import StreamSpec


def cell_records(
    spec: StreamSpec, counts: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per record: query index, event time and count, in generation order."""
    cell_query = np.repeat(np.arange(spec.num_queries), spec.num_windows)
    cell_start = np.tile(
        spec.start_ms + np.arange(spec.num_windows, dtype=np.int64) * spec.window_ms,
        spec.num_queries,
    )
    flat = counts.ravel()
    aggregated = (rng.random(flat.size) < spec.aggregate) & (flat > 0)
    single = np.where(aggregated, 0, flat)
    offsets = rng.integers(0, spec.window_ms, int(single.sum()), dtype=np.int64)
    query = np.concatenate([np.repeat(cell_query, single), cell_query[aggregated]])
    event_time = np.concatenate(
        [np.repeat(cell_start, single) + offsets, cell_start[aggregated]]
    )
    count = np.concatenate(
        [np.ones(offsets.size, dtype=np.int64), flat[aggregated].astype(np.int64)]
    )
    return query.astype(np.int32), event_time, count


def arrivals(
    spec: StreamSpec, event_time: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrival order, source record, duplicate flag and arrival time.

    The last three are indexed by emitted record (originals, then copies);
    `order` sorts them into arrival order.
    """
    n = event_time.size
    draw = rng.random(n)
    late = draw < spec.late_fraction
    out_of_order = ~late & (draw < spec.late_fraction + spec.out_of_order_fraction)
    delay = np.zeros(n, dtype=np.int64)
    delay[out_of_order] = rng.integers(
        1, spec.max_out_of_order_ms + 1, int(out_of_order.sum())
    )
    low, high = spec.late_delay_ms
    delay[late] = rng.integers(low, high + 1, int(late.sum()))
    copied = np.flatnonzero(rng.random(n) < spec.duplicate_fraction)
    # A copy arrives no earlier than its original and stays on the same side
    # of the watermark: on-time copies within the out-of-order bound, late
    # copies together with their original.
    first = delay[copied]
    copy_delay = rng.integers(first, np.maximum(first, spec.max_out_of_order_ms) + 1)
    source = np.concatenate([np.arange(n), copied])
    duplicate = np.concatenate([np.zeros(n, bool), np.ones(copied.size, bool)])
    arrival_ms = event_time[source] + np.concatenate([delay, copy_delay])
    # Stable, so an original arrives before a copy with the same arrival time.
    order = np.argsort(arrival_ms, kind="stable")
    return order, source, duplicate, arrival_ms

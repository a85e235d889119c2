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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from numpy.lib.stride_tricks import sliding_window_view

from transforms.records import zeitgeist_pb2

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
# 2026-01-05T00:00:00Z is a Monday, so daily and weekly profiles start aligned.
DEFAULT_START_MS = 1_767_571_200_000
SPIKE = "SPIKE"
DIP = "DIP"
_PLACEMENT_ATTEMPTS = 20


@dataclass(frozen=True)
class StreamSpec:
    """What to simulate. Times are epoch milliseconds; rates are per window.

    `start_ms` and `duration_ms` must be multiples of `window_ms` so that the
    generator's windows are exactly Beam's epoch-aligned `FixedWindows`.
    """

    num_queries: int = 100
    start_ms: int = DEFAULT_START_MS
    duration_ms: int = 3 * DAY_MS
    window_ms: int = 5 * MINUTE_MS
    # Expected events per window of the most popular query; rank r gets
    # base_rate / r**zipf_exponent, never less than min_rate.
    base_rate: float = 400.0
    zipf_exponent: float = 1.0
    min_rate: float = 2.0
    # Daily sine amplitude as a fraction of the rate; the phase is per query.
    seasonality: float = 0.4
    # Multiplicative change per day, with a random sign per query.
    drift_per_day: float = 0.05
    # Mean number of episodes per query per day after the warm-up.
    episodes_per_query_day: float = 1.0
    episode_windows: tuple[int, int] = (3, 12)
    magnitude_sigma: tuple[float, float] = (4.0, 8.0)
    dip_fraction: float = 0.5
    # Dips go only where every window of the episode expects at least this
    # much; elsewhere the episode is injected as a spike.
    min_dip_expected: float = 20.0
    # Quiet windows kept between two episodes of the same query, so that
    # detections of one are never credited to the other.
    episode_gap_windows: int = 12
    warmup_ms: int = 12 * HOUR_MS
    # Fraction of (query, window) cells emitted as one record with count=N.
    aggregate: float = 0.0
    out_of_order_fraction: float = 0.0
    max_out_of_order_ms: int = MINUTE_MS
    watermark_lag_ms: int = 2 * MINUTE_MS
    late_fraction: float = 0.0
    late_delay_ms: tuple[int, int] = (15 * MINUTE_MS, HOUR_MS)
    duplicate_fraction: float = 0.0

    def __post_init__(self) -> None:
        for ok, message in self._checks():
            if not ok:
                raise ValueError(f"invalid StreamSpec: {message}")

    def _checks(self) -> list[tuple[bool, str]]:
        fractions = (
            "dip_fraction",
            "aggregate",
            "out_of_order_fraction",
            "late_fraction",
            "duplicate_fraction",
        )
        return [
            (
                min(self.num_queries, self.window_ms, self.duration_ms) > 0,
                "num_queries, window_ms and duration_ms must be positive",
            ),
            (
                self.start_ms % self.window_ms == 0
                and self.duration_ms % self.window_ms == 0,
                "start_ms and duration_ms must be multiples of window_ms",
            ),
            (0 <= self.seasonality < 1, "seasonality must be in [0, 1)"),
            (
                min(self.min_rate, self.base_rate, self.episodes_per_query_day) >= 0,
                "rates must be >= 0",
            ),
            (
                1 <= self.episode_windows[0] <= self.episode_windows[1],
                "episode_windows must be an ordered range of at least 1",
            ),
            (
                0 < self.magnitude_sigma[0] <= self.magnitude_sigma[1],
                "magnitude_sigma must be an ordered positive range",
            ),
            *(
                (0 <= getattr(self, f) <= 1, f"{f} must be in [0, 1]")
                for f in fractions
            ),
            (
                self.out_of_order_fraction + self.late_fraction <= 1,
                "out_of_order_fraction + late_fraction must be <= 1",
            ),
            (
                self.out_of_order_fraction == 0 or self.max_out_of_order_ms > 0,
                "out-of-order records need max_out_of_order_ms > 0",
            ),
            (
                0 <= self.max_out_of_order_ms <= self.watermark_lag_ms
                and self.watermark_lag_ms < self.late_delay_ms[0]
                and self.late_delay_ms[0] <= self.late_delay_ms[1],
                "need max_out_of_order_ms <= watermark_lag_ms < late_delay_ms[0]"
                " <= late_delay_ms[1]",
            ),
        ]

    @property
    def num_windows(self) -> int:
        return self.duration_ms // self.window_ms

    def quiet(self) -> StreamSpec:
        """The same traffic without episodes, for measuring false alarms."""
        return dataclasses.replace(self, episodes_per_query_day=0.0)


@dataclass(frozen=True)
class Episode:
    """One injected anomaly: `[start_ms, end_ms)` is window-aligned.

    `magnitude_sigma` is the shift actually applied, in standard deviations of
    the baseline window count, in every window of the episode. For a dip that
    hit zero it is below the requested magnitude.
    """

    query: str
    kind: str
    start_ms: int
    end_ms: int
    magnitude_sigma: float


@dataclass(frozen=True, eq=False)
class GeneratedStream:
    """A generated stream: records in arrival order plus the ground truth.

    Per-cell arrays have shape (num_queries, num_windows): `baseline_counts`
    and `expected_counts` are the Poisson means without and with episodes,
    and `counts` are the realised searches per cell, which is what a correct
    pipeline counts after removing duplicates and including late records.
    Per-record arrays are in arrival order; `arrival_ms` is the simulated
    arrival clock and is non-decreasing.
    """

    spec: StreamSpec
    seed: int
    query_names: tuple[str, ...]
    episodes: tuple[Episode, ...]
    baseline_counts: np.ndarray
    expected_counts: np.ndarray
    counts: np.ndarray
    query_index: np.ndarray
    event_time_ms: np.ndarray
    record_index: np.ndarray
    count: np.ndarray
    arrival_ms: np.ndarray
    is_duplicate: np.ndarray

    def __len__(self) -> int:
        return len(self.event_time_ms)

    @property
    def window_starts(self) -> np.ndarray:
        """Start of each window, aligned with the columns of `counts`."""
        return (
            self.spec.start_ms + np.arange(self.spec.num_windows) * self.spec.window_ms
        )

    @property
    def delay_ms(self) -> np.ndarray:
        return self.arrival_ms - self.event_time_ms

    @property
    def is_late(self) -> np.ndarray:
        """Records behind the watermark of `watermark_schedule()` on arrival."""
        return self.event_time_ms < self.watermark_schedule()

    def watermark_schedule(self, lag_ms: int | None = None) -> np.ndarray:
        """The watermark in force as each record arrives: arrival time - lag.

        With the spec's lag, out-of-order records are still ahead of it and
        late records are behind it.
        """
        lag = self.spec.watermark_lag_ms if lag_ms is None else lag_ms
        return self.arrival_ms - lag

    def record_ids(self) -> list[str]:
        """Deterministic ids, unique per seed; duplicates repeat the original's."""
        return [f"{self.seed}-{i}" for i in self.record_index.tolist()]

    def iter_events(self) -> Iterator[zeitgeist_pb2.SearchQuery]:
        """Build the `SearchQuery` protos lazily, in arrival order."""
        for query, event_time, record_id, count in self._rows(self.query_names):
            yield zeitgeist_pb2.SearchQuery(
                query=query,
                event_time=event_time,
                record_id=record_id,
                count=count,
            )

    @cached_property
    def events(self) -> list[zeitgeist_pb2.SearchQuery]:
        return list(self.iter_events())

    def to_arrow(self) -> pa.Table:
        """Columns `query, event_time, record_id, count` in arrival order."""
        names = pa.array(self.query_names, pa.string())
        query = pa.DictionaryArray.from_arrays(self.query_index, names)
        return pa.table(
            {
                "query": query.cast(pa.string()),
                "event_time": pa.array(self.event_time_ms, pa.int64()),
                "record_id": pa.array(self.record_ids(), pa.string()),
                "count": pa.array(self.count, pa.int64()),
            }
        )

    def write_jsonl(self, path: str | Path) -> None:
        # Names are JSON-escaped once per query rather than once per line.
        quoted = [json.dumps(name) for name in self.query_names]
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(
                f'{{"query": {q}, "event_time": {t}, '
                f'"record_id": "{rid}", "count": {n}}}\n'
                for q, t, rid, n in self._rows(quoted)
            )

    def write_csv(self, path: str | Path) -> None:
        pa_csv.write_csv(self.to_arrow(), str(path))

    def write_parquet(self, path: str | Path, row_group_rows: int = 1 << 16) -> None:
        """Parquet in row groups of `row_group_rows`: the units readers split on."""
        pq.write_table(self.to_arrow(), str(path), row_group_size=row_group_rows)

    def write_episodes(self, path: str | Path) -> None:
        """Episodes as a JSON list of objects with the `Episode` fields."""
        payload = [dataclasses.asdict(episode) for episode in self.episodes]
        Path(path).write_text(json.dumps(payload, indent=1), encoding="utf-8")

    def _rows(self, names: Sequence[str]) -> Iterator[tuple[str, int, str, int]]:
        """(names[query index], event_time, record_id, count) per record."""
        return zip(
            [names[q] for q in self.query_index.tolist()],
            self.event_time_ms.tolist(),
            self.record_ids(),
            self.count.tolist(),
            strict=True,
        )


def load_episodes(path: str | Path) -> list[Episode]:
    """Read a file written by `GeneratedStream.write_episodes`."""
    return [Episode(**item) for item in json.loads(Path(path).read_text("utf-8"))]


def generate(spec: StreamSpec, seed: int) -> GeneratedStream:
    """Simulate `spec` deterministically from `seed`."""
    traffic, placement, poisson, timing, arrival = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(5)
    )
    width = len(str(spec.num_queries - 1))
    names = tuple(f"q{rank:0{width}d}" for rank in range(spec.num_queries))
    baseline = _baseline(spec, traffic)
    episodes, expected = _inject_episodes(spec, baseline, names, placement)
    counts = poisson.poisson(expected)
    query, event_time, cell_count = _records(spec, counts, timing)
    order, source, duplicate, arrival_ms = _arrivals(spec, event_time, arrival)
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


def _baseline(spec: StreamSpec, rng: np.random.Generator) -> np.ndarray:
    """Expected count per (query, window) before episodes."""
    ranks = np.arange(1, spec.num_queries + 1)
    rate = np.maximum(spec.base_rate / ranks**spec.zipf_exponent, spec.min_rate)
    phase = rng.uniform(0.0, 2 * np.pi, spec.num_queries)
    sign = rng.choice([-1.0, 1.0], spec.num_queries)
    # Window midpoints, so a window's level is its average rather than its edge.
    mid = spec.start_ms + (np.arange(spec.num_windows) + 0.5) * spec.window_ms
    angle = 2 * np.pi * (mid % DAY_MS) / DAY_MS
    season = 1 + spec.seasonality * np.sin(angle[None, :] + phase[:, None])
    days = (mid - spec.start_ms) / DAY_MS
    drift = (1 + spec.drift_per_day) ** (sign[:, None] * days[None, :])
    return rate[:, None] * season * drift


def _inject_episodes(
    spec: StreamSpec,
    baseline: np.ndarray,
    names: tuple[str, ...],
    rng: np.random.Generator,
) -> tuple[list[Episode], np.ndarray]:
    expected = baseline.copy()
    episodes = []
    for q, name in enumerate(names):
        for start, end, dip, magnitude in _place_episodes(spec, baseline[q], rng):
            base = baseline[q, start:end]
            sigma = np.sqrt(base)
            if dip:
                expected[q, start:end] = np.maximum(base - magnitude * sigma, 0.0)
                magnitude = float(np.min((base - expected[q, start:end]) / sigma))
            else:
                expected[q, start:end] = base + magnitude * sigma
            episodes.append(
                Episode(
                    query=name,
                    kind=DIP if dip else SPIKE,
                    start_ms=spec.start_ms + start * spec.window_ms,
                    end_ms=spec.start_ms + end * spec.window_ms,
                    magnitude_sigma=magnitude,
                )
            )
    episodes.sort(key=lambda e: (e.start_ms, e.query))
    return episodes, expected


def _place_episodes(
    spec: StreamSpec, baseline: np.ndarray, rng: np.random.Generator
) -> list[tuple[int, int, bool, float]]:
    """(start window, end window, is dip, magnitude) for one query, by start."""
    first = -(-spec.warmup_ms // spec.window_ms)
    eligible_days = max(spec.num_windows - first, 0) * spec.window_ms / DAY_MS
    shortest, longest = spec.episode_windows
    placed: list[tuple[int, int, bool, float]] = []
    for _ in range(rng.poisson(spec.episodes_per_query_day * eligible_days)):
        # Rejection sampling keeps episodes apart; a crowded query just gets
        # fewer of them.
        for _ in range(_PLACEMENT_ATTEMPTS):
            length = int(rng.integers(shortest, longest + 1))
            starts = np.arange(first, spec.num_windows - length + 1)
            if starts.size == 0:
                break
            dip = bool(rng.random() < spec.dip_fraction)
            if dip:
                lowest = sliding_window_view(baseline, length).min(axis=1)[starts]
                dip_starts = starts[lowest >= spec.min_dip_expected]
                # A query too quiet for a dip of this length gets a spike.
                dip = dip_starts.size > 0
                starts = dip_starts if dip else starts
            start = int(rng.choice(starts))
            end = start + length
            gap = spec.episode_gap_windows
            if all(end + gap <= s or e + gap <= start for s, e, _, _ in placed):
                magnitude = float(rng.uniform(*spec.magnitude_sigma))
                placed.append((start, end, dip, magnitude))
                break
    return sorted(placed)


def _records(
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


def _arrivals(
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

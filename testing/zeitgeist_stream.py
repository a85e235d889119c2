"""A generated Zeitgeist stream as data: records, ground truth and file writers.

`GeneratedStream` is what `testing.zeitgeist_generator.generate` returns and
all its consumers read. Keeping it free of the simulation means the views
(events, Arrow, watermark schedule) and file formats can change without
touching how traffic is drawn, and the ground truth (`Episode`) can be
written and read back by an evaluator that never generates anything.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from testing.zeitgeist_spec import StreamSpec
from transforms.records import zeitgeist_pb2

# The values of `Episode.kind`.
SPIKE = "SPIKE"
DIP = "DIP"


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

    def record_ids(self, part: slice = slice(None)) -> list[str]:
        """Deterministic ids of the records of `part` (all by default), unique
        per seed; duplicates repeat the original's."""
        return [f"{self.seed}-{i}" for i in self.record_index[part].tolist()]

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

    def write_jsonl(self, path: str | Path, part: slice = slice(None)) -> None:
        """The records of `part` (all by default) as JSON Lines."""
        # Names are JSON-escaped once per query rather than once per line.
        quoted = [json.dumps(name) for name in self.query_names]
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(
                f'{{"query": {q}, "event_time": {t}, '
                f'"record_id": "{rid}", "count": {n}}}\n'
                for q, t, rid, n in self._rows(quoted, part)
            )

    def write_csv(self, path: str | Path) -> None:
        pa_csv.write_csv(self.to_arrow(), str(path))

    def write_parquet(self, path: str | Path, row_group_rows: int = 1 << 16) -> None:
        """Parquet in row groups of `row_group_rows`: the units readers split on."""
        pq.write_table(self.to_arrow(), str(path), row_group_size=row_group_rows)

    def write_episodes(self, path: str | Path) -> None:
        write_episodes(self.episodes, path)

    def _rows(
        self, names: Sequence[str], part: slice = slice(None)
    ) -> Iterator[tuple[str, int, str, int]]:
        """(names[query index], event_time, record_id, count) per record of
        `part` (all by default)."""
        return zip(
            [names[q] for q in self.query_index[part].tolist()],
            self.event_time_ms[part].tolist(),
            self.record_ids(part),
            self.count[part].tolist(),
            strict=True,
        )


def write_episodes(episodes: Iterable[Episode], path: str | Path) -> None:
    """Episodes as a JSON list of objects with the `Episode` fields."""
    payload = [dataclasses.asdict(episode) for episode in episodes]
    Path(path).write_text(json.dumps(payload, indent=1), encoding="utf-8")


def load_episodes(path: str | Path) -> list[Episode]:
    """Read a file written by `GeneratedStream.write_episodes`."""
    return [Episode(**item) for item in json.loads(Path(path).read_text("utf-8"))]

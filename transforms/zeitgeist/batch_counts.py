"""Tables of searches counted per (query, window) before any per-search Python.

`PreCountSearches` is the columnar front of `ZeitgeistOnBatches`: it takes
the Arrow tables `ReadSearchBatches` reads and sums their rows per (key,
window), as `KeyByQuery` and `CombineWithinBundle` would, then hands on one
partial series per key of each table (`PartialSeries`): a million searches
cost a few thousand Python objects rather than a million.
"""

from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.transforms.window import BoundedWindow

from transforms.millwheel.event_time import restamped, to_timestamp
from transforms.records.zeitgeist_pb2 import SearchQuery
from transforms.zeitgeist.count_sums import add_counts, may_pass_max
from transforms.zeitgeist.keying import EMPTY_KEY, dead_search

IDENTIFIED = "identified"
LATEST = "latest"
_NO_KEY = -1


class PreCountSearches(beam.DoFn):
    """A table of searches to `(key, [(window start, count)])` partial
    series (`PartialSeries`).

    Input: `pa.Table`s of valid searches (`SEARCH_SCHEMA`). Each query is
    normalised once per distinct value in the table (`key_fn`, as
    `KeyByQuery`); rows whose key is empty become `KeyByQuery`'s dead
    letters. The other rows are summed per (key, window start), and each
    key's sums leave as one element, stamped with the earliest event time
    among its rows.

    With `split_identified`, rows that carry a record id are not summed:
    each is emitted alone on the `identified` tag as `(key, SearchQuery)`,
    for `DedupByRecordId` to see every id. The `latest` tag carries the
    latest event time of each table's summed rows, which the partial series
    (stamped with their earliest) no longer show: the input's end.
    """

    def __init__(
        self, window_ms: int, key_fn: Callable[[str], str], split_identified: bool
    ):
        self._window_ms = window_ms
        self._key_fn = key_fn
        self._split_identified = split_identified

    def process(self, table: pa.Table, window=beam.DoFn.WindowParam) -> Iterator[Any]:
        if not table.num_rows:
            return
        table = table.combine_chunks()
        keys, key_codes = self._keys(table.column("query").chunk(0))
        keyed = key_codes != _NO_KEY
        yield from _unkeyable(table, ~keyed)
        summed = keyed
        if self._split_identified:
            identified = keyed & table.column("record_id").is_valid().to_numpy(
                zero_copy_only=False
            )
            yield from _identified(table, identified, keys, key_codes)
            summed = keyed & ~identified
        if summed.any():
            yield from self._partial_series(table, summed, keys, key_codes, window)

    def _keys(self, queries: pa.Array) -> tuple[list[str], np.ndarray]:
        """The distinct non-empty keys, and each row's index among them."""
        encoded = pc.dictionary_encode(queries)
        codes_of_queries = np.empty(len(encoded.dictionary), np.int64)
        keys: dict[str, int] = {}
        for i, query in enumerate(encoded.dictionary.to_pylist()):
            key = self._key_fn(query)
            codes_of_queries[i] = keys.setdefault(key, len(keys)) if key else _NO_KEY
        return list(keys), codes_of_queries[encoded.indices.to_numpy()]

    def _partial_series(
        self,
        table: pa.Table,
        rows: np.ndarray,
        keys: list[str],
        codes: np.ndarray,
        window: BoundedWindow,
    ) -> Iterator[Any]:
        event_ms = table.column("event_time").to_numpy()[rows]
        counts = pc.fill_null(table.column("count"), 1).to_numpy()[rows]
        row_keys = codes[rows]
        row_starts = event_ms - event_ms % self._window_ms
        grouped = (
            pa.table(
                {
                    "key": row_keys,
                    "start": row_starts,
                    "count": counts,
                    "event_time": event_ms,
                }
            )
            .group_by(["key", "start"])
            .aggregate([("count", "sum"), ("event_time", "min")])
        )
        # One element per key rather than per (key, window): each element
        # costs microseconds of Beam's work and of the shuffle to the
        # series, and a table holds tens of windows of each of its queries.
        key_codes = grouped.column("key").to_numpy()
        starts = grouped.column("start").to_numpy()
        sums = grouped.column("count_sum").to_numpy()
        if may_pass_max(counts):
            # Arrow's sums wrap round past int64; these few are redone.
            sums = _saturated_sums(row_keys, row_starts, counts, key_codes, starts)
        firsts = grouped.column("event_time_min").to_numpy()
        order = np.argsort(key_codes, kind="stable")
        bounds = np.flatnonzero(np.diff(key_codes[order])) + 1
        for key_rows in np.split(order, bounds):
            key = keys[key_codes[key_rows[0]]]
            series = list(
                zip(starts[key_rows].tolist(), sums[key_rows].tolist(), strict=True)
            )
            earliest = int(firsts[key_rows].min())
            yield restamped((key, series), to_timestamp(earliest), window)
        yield beam.pvalue.TaggedOutput(LATEST, int(event_ms.max()))


def _saturated_sums(
    row_keys: np.ndarray,
    row_starts: np.ndarray,
    counts: np.ndarray,
    keys: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """The sum of the rows' counts for each (key, start), by `add_counts`."""
    sums: dict[tuple[int, int], int] = {}
    rows = zip(row_keys.tolist(), row_starts.tolist(), counts.tolist(), strict=True)
    for key, start, count in rows:
        sums[key, start] = add_counts(sums.get((key, start), 0), count)
    pairs = zip(keys.tolist(), starts.tolist(), strict=True)
    return np.array([sums[pair] for pair in pairs], np.int64)


def _searches(table: pa.Table, rows: np.ndarray) -> Iterator[tuple[int, SearchQuery]]:
    """The rows at `rows` as the `SearchQuery` the per-row parser made."""
    for i in np.flatnonzero(rows).tolist():
        count = table.column("count")[i].as_py()
        record_id = table.column("record_id")[i].as_py()
        yield (
            i,
            SearchQuery(
                query=table.column("query")[i].as_py(),
                event_time=table.column("event_time")[i].as_py(),
                record_id=record_id,
                count=count,
            ),
        )


def _unkeyable(table: pa.Table, rows: np.ndarray) -> Iterator[Any]:
    for _, search in _searches(table, rows):
        yield dead_search(search, EMPTY_KEY)


def _identified(
    table: pa.Table, rows: np.ndarray, keys: list[str], codes: np.ndarray
) -> Iterator[Any]:
    for i, search in _searches(table, rows):
        stamped = beam.window.TimestampedValue(
            (keys[codes[i]], search), to_timestamp(search.event_time)
        )
        yield beam.pvalue.TaggedOutput(IDENTIFIED, stamped)

"""Searches validated over whole Arrow columns, as `parse_search_query` would.

The columnar readers (`search_batches` for Parquet, `text_batches` for CSV
and JSON Lines) turn their input into record batches of typed columns and
`screen` them: the rows every vectorised check clears become a table of
valid searches (`SEARCH_SCHEMA`), and the rest go to the per-row reader,
whose verdicts `with_rescued` merges back. The checks only ever clear a row
the parser would accept with the same values, so a reader built on them
gives exactly the per-row reader's searches and dead letters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.records.parse import (
    INT64_MAX,
    MAX_EVENT_TIME_MS,
    MAX_QUERY_CHARS,
    MIN_EVENT_TIME_MS,
)
from transforms.records.zeitgeist_pb2 import SearchQuery

# `count` null is an unset count (one search); `record_id` null is no id.
SEARCH_SCHEMA = pa.schema(
    [
        pa.field("query", pa.string(), nullable=False),
        pa.field("event_time", pa.int64(), nullable=False),
        pa.field("count", pa.int64()),
        pa.field("record_id", pa.string()),
    ]
)

# The characters `str.isspace` calls whitespace (a test checks the list
# against every code point): RE2's `\s` is narrower than Python's, and a
# query made of them alone must take the per-row path to its dead letter.
PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_NOT_BLANK = "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in PYTHON_WHITESPACE) + "]"
_UNITS_PER_MS = {"us": 1000, "ns": 1_000_000}


class Screened(NamedTuple):
    """A record batch split by `screen`."""

    searches: pa.Table  # the rows every check cleared, as `SEARCH_SCHEMA`
    suspects: np.ndarray  # positions of the other rows, for the per-row path


def screen(batch: pa.RecordBatch) -> Screened:
    """Clear the rows of `batch` that `parse_search_query` would accept.

    A row is cleared only when each of its values passes the parser's
    checks as a column: a non-null query of 1 to `MAX_QUERY_CHARS`
    characters, not all whitespace; an integer or timestamp event time in
    range; an integer count >= 0 or none; a string record id or none. A
    batch whose columns have other types, or whose strings are not valid
    UTF-8, clears no row.
    """
    everything = np.arange(batch.num_rows)
    if not _screenable(batch):
        return Screened(SEARCH_SCHEMA.empty_table(), everything)
    event_ms, time_ok = _event_millis(batch.column("event_time"))
    count, count_ok = _counts(_optional_column(batch, "count"))
    query = batch.column("query")
    query_ok = pc.and_(
        pc.less_equal(pc.utf8_length(query), MAX_QUERY_CHARS),
        pc.match_substring_regex(query, _NOT_BLANK),
    )
    ok = pc.fill_null(pc.and_(pc.and_(query_ok, time_ok), count_ok), False)
    record_id = pc.cast(_optional_column(batch, "record_id"), pa.string())
    # An empty record id is no id, as the parser has it.
    record_id = pc.if_else(pc.equal(record_id, ""), None, record_id)
    columns = [query, event_ms, count, record_id]
    cleared = [
        pc.filter(pc.cast(column, field.type), ok)
        for column, field in zip(columns, SEARCH_SCHEMA, strict=True)
    ]
    searches = pa.Table.from_arrays(cleared, schema=SEARCH_SCHEMA)
    return Screened(searches, everything[~ok.to_numpy(zero_copy_only=False)])


def _screenable(batch: pa.RecordBatch) -> bool:
    """Whether `batch`'s columns are of types `screen` can judge.

    Columns the parser ignores must also convert to Python without error,
    since a row the per-row path cannot convert is a dead letter there.
    """
    names = batch.schema.names
    if len(set(names)) != len(names) or "query" not in names:
        return False
    if "event_time" not in names:
        return False
    wanted = {
        "query": _is_text,
        "event_time": lambda t: pa.types.is_integer(t) or pa.types.is_timestamp(t),
        "count": lambda t: pa.types.is_integer(t) or pa.types.is_null(t),
        "record_id": lambda t: _is_text(t) or pa.types.is_null(t),
    }
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if not wanted.get(field.name, _converts_plainly)(field.type):
            return False
        if _is_text(field.type) and not _valid_utf8(column):
            return False
    return True


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _converts_plainly(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
        or _is_text(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _valid_utf8(column: pa.Array) -> bool:
    # Parquet readers do not check UTF-8; the per-row path fails on it.
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _optional_column(batch: pa.RecordBatch, name: str) -> pa.Array:
    if name in batch.schema.names:
        return batch.column(name)
    return pa.nulls(batch.num_rows)


def _between(values: pa.Array, low: int, high: int) -> pa.Array:
    if pa.types.is_unsigned_integer(values.type):
        # Against a Python int bound pyarrow casts the column to int64, and
        # one value past int64's range would fail the whole batch (and the
        # row group): compare in uint64, where every unsigned value fits.
        values = values.cast(pa.uint64())
        low = pa.scalar(max(low, 0), pa.uint64())
        high = pa.scalar(high, pa.uint64())
    return pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))


def _event_millis(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Event times in epoch ms, and where they are in range and exact."""
    exact = None
    millis = column
    if pa.types.is_timestamp(column.type):
        values = column.cast(pa.int64())
        unit = column.type.unit
        if unit == "s":
            # Bounded first, so that the product cannot overflow.
            low, high = MIN_EVENT_TIME_MS // 1000, MAX_EVENT_TIME_MS // 1000
            near = _between(values, low, high)
            millis = pc.multiply(pc.if_else(near, values, -1), 1000)
        elif unit == "ms":
            millis = values
        else:
            # Division truncates, which is the floor for times after 1970.
            millis = pc.divide(values, _UNITS_PER_MS[unit])
            if unit == "ns":
                # Python has no nanoseconds: such a time is a per-row rejection.
                whole_us = pc.multiply(pc.divide(values, 1000), 1000)
                exact = pc.equal(values, whole_us)
    ok = _between(millis, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS)
    if exact is not None:
        ok = pc.and_(ok, exact)
    # A 0 of the column's own type, for the reason `_between` gives.
    return pc.if_else(ok, millis, pa.scalar(0, millis.type)), ok


def _counts(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Counts (null where unset), and where they are unset or in range."""
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), pa.int64()), pa.array(np.ones(len(column), bool))
    in_range = pc.fill_null(_between(column, 0, INT64_MAX), False)
    ok = pc.or_(pc.is_null(column), in_range)
    return pc.if_else(in_range, column, None), ok


def with_rescued(searches: pa.Table, verdicts: Iterable[Any]) -> Iterator[Any]:
    """The dead letters among `verdicts` (the per-row reader's outputs for
    the rows `screen` did not clear), then `searches` with the valid ones
    appended, as one table unless it is empty."""
    rescued = []
    for verdict in verdicts:
        if isinstance(verdict, SearchQuery):
            rescued.append(verdict)
        else:
            yield verdict
    if rescued:
        searches = pa.concat_tables([searches, _as_table(rescued)])
    if searches.num_rows:
        yield searches


def _as_table(searches: list[SearchQuery]) -> pa.Table:
    """Parsed searches as `SEARCH_SCHEMA` columns, unset fields null."""
    return pa.Table.from_pydict(
        {
            "query": [s.query for s in searches],
            "event_time": [s.event_time for s in searches],
            "count": [_field(s, "count") for s in searches],
            "record_id": [_field(s, "record_id") for s in searches],
        },
        schema=SEARCH_SCHEMA,
    )


def _field(search: SearchQuery, name: str) -> Any:
    return getattr(search, name) if search.HasField(name) else None

"""Parquet record batches as Python rows, with unconvertible values rejected.

`RecordBatch.to_pylist` converts a whole batch or raises: one timestamp
beyond Python's `datetime` range (year 10000, or before year 1) or with
sub-microsecond precision (a `timestamp[ns]` not on a whole microsecond)
would fail the batch, and with it the job. `rows` converts a batch at once
when it can and otherwise column by column for each row, so that only the
rows holding such a value become `Rejected`, naming the column and the raw
value in the column's own unit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from transforms.records.dead_letters import INVALID_FIELD, Rejected
from transforms.records.parse import RowWithRepeats

# What pyarrow raises for a value Python cannot hold: OverflowError (a date
# out of range) or ValueError (nanoseconds that would be lost).
_CONVERSION_ERRORS = (OverflowError, ValueError, pa.ArrowException)


Row = dict[str, Any]


def rows(batch: pa.RecordBatch) -> Iterator[tuple[Row, Rejected | None]]:
    """Each row of `batch` as a dict, with None, or, if one of its values has
    no Python equivalent, with that value as stored and why it is rejected.
    Columns of one name make each row a `RowWithRepeats`."""
    names = batch.schema.names
    repeated = frozenset(name for name in names if names.count(name) > 1)
    for row, unconvertible in _converted(batch):
        yield (RowWithRepeats(row, repeated) if repeated else row), unconvertible


def _converted(batch: pa.RecordBatch) -> Iterator[tuple[Row, Rejected | None]]:
    try:
        for row in batch.to_pylist():
            yield row, None
        return
    except _CONVERSION_ERRORS:
        pass  # rare: find the rows at fault, one value at a time
    columns = batch.columns
    names = batch.schema.names
    for i in range(batch.num_rows):
        yield _row(names, columns, i)


def _row(
    names: list[str], columns: list[pa.Array], i: int
) -> tuple[Row, Rejected | None]:
    row: Row = {}
    problem = None
    for name, column in zip(names, columns, strict=True):
        scalar = column[i]
        try:
            row[name] = scalar.as_py()
        except _CONVERSION_ERRORS as error:
            row[name] = _raw_value(scalar)
            problem = problem or (name, scalar.type, error)
    if problem is None:
        return row, None
    name, kind, error = problem
    return row, Rejected(
        INVALID_FIELD,
        f"field {name!r} ({kind}) has a value Python cannot represent "
        f"({_why(error)}): {row[name]!r}",
    )


def _raw_value(scalar: pa.Scalar) -> Any:
    """The stored integer of a temporal value, which always converts."""
    value = getattr(scalar, "value", None)
    return value if value is not None else str(scalar.type)


def _why(error: Exception) -> str:
    if isinstance(error, OverflowError):
        return "out of range"
    if "Nanosecond" in str(error):
        return "sub-microsecond precision"
    return type(error).__name__

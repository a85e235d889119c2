"""Classify raw input as a record or a dead letter, and count both.

The shared core of the readers: decoding a line, parsing JSON, running a
record parser, and turning each failure into a `DeadLetter` whose reason
category has its own counter. Counters live in `METRICS_NAMESPACE`:
`records_read`, `blank_lines`, `dead_letters`, and `dead_letter_<category>`
for each of `CATEGORIES`; the readers add `rows_unreadable` (the rows of a
Parquet row group that cannot be read) and `directories_skipped` (the
directories a pattern matched, which are not read).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from google.protobuf.message import Message

from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.lines import RAW_LIMIT_BYTES
from transforms.records.parse import InvalidRecord, RowWithRepeats

RECORDS = "records"
DEAD_LETTERS = "dead_letters"
METRICS_NAMESPACE = "millwheel.records"

INVALID_UTF8 = "invalid_utf8"
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
INVALID_FIELD = "invalid_field"
OVERSIZED = "oversized"
INVALID_CSV = "invalid_csv"
CSV_COLUMNS = "csv_columns"
CSV_HEADER = "csv_header"
UNREADABLE_FILE = "unreadable_file"
CATEGORIES = (
    INVALID_UTF8,
    INVALID_JSON,
    NOT_AN_OBJECT,
    INVALID_FIELD,
    OVERSIZED,
    INVALID_CSV,
    CSV_COLUMNS,
    CSV_HEADER,
    UNREADABLE_FILE,
)

Parser = Callable[[Mapping[str, Any]], Message]

_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class Rejected(Exception):
    """Raw input that goes to the dead letters, with its reason category."""

    def __init__(self, category: str, reason: str) -> None:
        super().__init__(reason)
        self.category = category
        self.reason = reason


@cache
def counter(name: str) -> Any:
    """The counter `name` in `METRICS_NAMESPACE`."""
    return Metrics.counter(METRICS_NAMESPACE, name)


def dead_letter(
    rejected: Rejected, raw: bytes, source: str, location: str, record_type: str
) -> beam.pvalue.TaggedOutput:
    """Count `rejected` and wrap it as a `DEAD_LETTERS` output.

    `raw` is cut to `RAW_LIMIT_BYTES`; `location` may be empty when the input
    has no position (in-memory elements).
    """
    counter("dead_letters").inc()
    counter("dead_letter_" + rejected.category).inc()
    letter = DeadLetter(
        source=source,
        location=location or None,
        raw=raw[:RAW_LIMIT_BYTES],
        reason=rejected.reason,
        record_type=record_type,
    )
    return beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)


def decode(line: bytes) -> str:
    """UTF-8 text of a line; undecodable bytes are `invalid_utf8`."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Rejected(
            INVALID_UTF8, f"invalid UTF-8 at byte {e.start}: {e.reason}"
        ) from None


def parse_row(parser: Parser, row: Mapping[str, Any]) -> Message:
    """`parser(row)`, with `InvalidRecord` as `invalid_field`."""
    try:
        return parser(row)
    except InvalidRecord as e:
        raise Rejected(INVALID_FIELD, e.reason) from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of a repeated key without a word; the parser
    # decides whether it is a field it reads (`RowWithRepeats`).
    row = dict(pairs)
    if len(row) == len(pairs):
        return row
    counts = collections.Counter(key for key, _ in pairs)
    return RowWithRepeats(row, frozenset(k for k, n in counts.items() if n > 1))


_DECODER = json.JSONDecoder(object_pairs_hook=_object)


def parse_json(parser: Parser, text: str) -> Message:
    """Parse one JSON object and then its fields."""
    try:
        row = _DECODER.decode(text)
    except RecursionError:
        raise Rejected(INVALID_JSON, "invalid JSON: nested too deeply") from None
    except json.JSONDecodeError as e:
        # Not str(e): its "line 1" would contradict the dead letter's location.
        reason = f"invalid JSON: {e.msg} at column {e.colno}"
        raise Rejected(INVALID_JSON, reason) from None
    except ValueError as e:  # an integer with too many digits
        raise Rejected(INVALID_JSON, f"invalid JSON: {e}") from None
    if not isinstance(row, dict):
        kind = _JSON_KINDS.get(type(row), type(row).__name__)
        raise Rejected(NOT_AN_OBJECT, f"JSON value is {kind}, not an object")
    return parse_row(parser, row)


def row_raw(row: Mapping[str, Any]) -> bytes:
    """A JSON rendering of a row that has no raw text of its own."""
    return json.dumps(row, default=str, ensure_ascii=False).encode()

"""Turn loosely-typed rows into validated record messages.

A row is a mapping of field name to value as a JSON object, a CSV row or a
Parquet row gives it. Each parser either returns a fully valid message or
raises `InvalidRecord` with a reason a person can act on ("missing field
'query'", "field 'count' must be a non-negative integer, got -3"). Parsers
never raise anything else for bad data, so readers can route every failure to a
dead-letter output.

Rules shared by all record types:

- Required fields must be present and not null (`required_fields` names
  them, for a CSV header to be checked); unknown fields are ignored.
- CSV gives only strings, so integer fields also accept decimal strings
  ("42"). Booleans are never integers. Floats are accepted only when whole.
- `event_time` is epoch milliseconds, or an ISO-8601 timestamp (a string, or
  a `datetime` from a Parquet timestamp column) that is read as UTC when it
  has no offset. Times outside [`MIN_EVENT_TIME_MS`, `MAX_EVENT_TIME_MS`] are
  rejected: they are almost always unit mistakes (seconds, microseconds).
- Optional fields that are absent, null or the empty string are left unset,
  since CSV cannot tell an empty cell from a missing value.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from google.protobuf.message import Message

from transforms.records.photon_pb2 import ClickEvent, QueryEvent
from transforms.records.zeitgeist_pb2 import SearchQuery

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)

MIN_EVENT_TIME = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
MAX_EVENT_TIME = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
MIN_EVENT_TIME_MS = (MIN_EVENT_TIME - _EPOCH) // _MS
MAX_EVENT_TIME_MS = (MAX_EVENT_TIME - _EPOCH) // _MS

MAX_QUERY_CHARS = 1024
INT64_MAX = 2**63 - 1
# Bounded so that int() never meets Python's digit limit; longer is out of
# range anyway.
_DECIMAL = re.compile(r"[+-]?[0-9]{1,30}")
_SHOWN_CHARS = 60

_M = TypeVar("_M", bound=Message)

Row = Mapping[str, Any]


class InvalidRecord(ValueError):
    """A row that cannot become a valid record; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_search_query(row: Row) -> SearchQuery:
    """Validate a Zeitgeist search row: query, event_time, [record_id], [count].

    `query` must be a non-blank string of at most `MAX_QUERY_CHARS`
    characters; it is stored as given, because normalisation belongs to the
    keying step. `count` (default 1) must be an integer >= 0: zero is a
    quiet bucket of a pre-aggregated feed.
    """
    query = _required_str(row, "query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRecord(
            f"field 'query' is {len(query)} characters long, "
            f"the maximum is {MAX_QUERY_CHARS}"
        )
    return _build(
        SearchQuery,
        query=query,
        event_time=_event_time(row),
        record_id=_optional_str(row, "record_id"),
        count=_count(row),
    )


def parse_query_event(row: Row) -> QueryEvent:
    """Validate a Photon query row: query_id, event_time, and optional
    query_text, advertiser_id, ad_id, record_id."""
    return _build(
        QueryEvent,
        query_id=_required_str(row, "query_id"),
        event_time=_event_time(row),
        query_text=_optional_str(row, "query_text"),
        advertiser_id=_optional_str(row, "advertiser_id"),
        ad_id=_optional_str(row, "ad_id"),
        record_id=_optional_str(row, "record_id"),
    )


def parse_click_event(row: Row) -> ClickEvent:
    """Validate a Photon click row: click_id, query_id, event_time, and
    optional ad_id, record_id."""
    return _build(
        ClickEvent,
        click_id=_required_str(row, "click_id"),
        query_id=_required_str(row, "query_id"),
        event_time=_event_time(row),
        ad_id=_optional_str(row, "ad_id"),
        record_id=_optional_str(row, "record_id"),
    )


# The fields each parser requires, in the order it checks them: what a CSV
# header must name for its rows to be readable at all. A test checks each
# entry against its parser.
_REQUIRED_FIELDS: dict[Callable[[Row], Message], tuple[str, ...]] = {
    parse_search_query: ("query", "event_time"),
    parse_query_event: ("query_id", "event_time"),
    parse_click_event: ("click_id", "query_id", "event_time"),
}


def required_fields(parser: Callable[[Row], Message]) -> tuple[str, ...]:
    """The fields `parser` requires, if it is one of this module's parsers;
    () for any other, whose needs are unknown."""
    return _REQUIRED_FIELDS.get(parser, ())


def _build(message_type: type[_M], **fields: Any) -> _M:
    try:
        return message_type(**fields)
    except UnicodeEncodeError:
        # JSON can smuggle in lone surrogates ("\ud800"), which protobuf
        # refuses; find the field only on this rare path.
        for name, value in fields.items():
            if isinstance(value, str) and not _is_utf8_encodable(value):
                raise InvalidRecord(
                    f"field {name!r} is not valid Unicode text "
                    "(it contains a lone surrogate)"
                ) from None
        raise


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class RowWithRepeats(dict):
    """A row whose source named some fields twice: a JSON object with a
    repeated key, or Parquet columns of one name. As a dict it holds one
    value of each; `repeated` names them, and a parser refuses such a field
    rather than guess which value the writer meant (a CSV header naming a
    column twice is refused whole). Fields no parser reads may repeat."""

    def __init__(self, values: Row, repeated: frozenset[str]) -> None:
        super().__init__(values)
        self.repeated = repeated


def _value(row: Row, name: str) -> Any:
    if name in getattr(row, "repeated", ()):
        raise InvalidRecord(f"field {name!r} is given twice")
    return row.get(name)


def _required(row: Row, name: str) -> Any:
    value = _value(row, name)
    if value is None:
        raise InvalidRecord(f"missing field {name!r}")
    return value


def _required_str(row: Row, name: str) -> str:
    value = _required(row, name)
    if not isinstance(value, str):
        raise InvalidRecord(
            f"field {name!r} must be a string, got {type(value).__name__}"
        )
    if not value or value.isspace():
        raise InvalidRecord(f"field {name!r} must be a non-empty string")
    return value


def _optional_str(row: Row, name: str) -> str | None:
    value = _value(row, name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidRecord(
            f"field {name!r} must be a string, got {type(value).__name__}"
        )
    return value


def _count(row: Row) -> int | None:
    value = _value(row, "count")
    if value is None or value == "":
        return None  # unset reads as the proto default, 1
    count = _as_int(value)
    # Zero is data: pre-aggregated feeds send it for a quiet bucket.
    if count is None or not 0 <= count <= INT64_MAX:
        raise InvalidRecord(
            f"field 'count' must be a non-negative integer, got {_show(value)}"
        )
    return count


def _event_time(row: Row) -> int:
    value = _required(row, "event_time")
    millis = _as_int(value)
    if millis is None:
        millis = _iso_millis(value)
    reason = event_time_problem(millis, _show(value))
    if reason is not None:
        raise InvalidRecord(reason)
    return millis


def event_time_problem(millis: int, shown: str | None = None) -> str | None:
    """Why an event time of `millis` is refused (outside the accepted range:
    most often seconds or microseconds where milliseconds are meant), or
    None. `shown` is the value as the record gave it, if not `millis`."""
    if MIN_EVENT_TIME_MS <= millis <= MAX_EVENT_TIME_MS:
        return None
    return (
        f"field 'event_time' must be between {MIN_EVENT_TIME:%Y-%m-%d} and "
        f"{MAX_EVENT_TIME:%Y-%m-%d} UTC, got {millis if shown is None else shown}"
    )


def _as_int(value: Any) -> int | None:
    """The integer a field value denotes, or None if it is not an integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        # int() of the stripped text: `str.strip` removes whitespace (such as
        # "\x1f") that int() itself would refuse.
        digits = value.strip()
        if _DECIMAL.fullmatch(digits):
            return int(digits)
    return None


def _iso_millis(value: Any) -> int:
    when = value
    if isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            when = None
    if not isinstance(when, dt.datetime):
        raise InvalidRecord(
            "field 'event_time' must be epoch milliseconds or an ISO-8601 "
            f"timestamp, got {_show(value)}"
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    # Integer arithmetic on timedeltas: float seconds would round the ms.
    return (when - _EPOCH) // _MS


def _show(value: Any) -> str:
    """A bounded repr, so that a huge bad value cannot bloat the reason."""
    shown = repr(value)
    if len(shown) > _SHOWN_CHARS:
        return shown[:_SHOWN_CHARS] + "..."
    return shown

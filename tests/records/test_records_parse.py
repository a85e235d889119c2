"""Row validation rules, good and bad, with the reasons people will read."""

import datetime as dt

import pytest

from transforms.records import ClickEvent, QueryEvent, SearchQuery
from transforms.records.parse import (
    MAX_EVENT_TIME_MS,
    MIN_EVENT_TIME_MS,
    InvalidRecord,
    parse_click_event,
    parse_query_event,
    parse_search_query,
    required_fields,
)

T = 1700000000000  # 2023-11-14T22:13:20Z


def search(**fields):
    return parse_search_query({"query": "weather", "event_time": T} | fields)


def rejected(parser, row) -> str:
    with pytest.raises(InvalidRecord) as info:
        parser(row)
    return info.value.reason


def test_minimal_row_gives_a_query_with_default_count():
    query = parse_search_query({"query": "weather", "event_time": T})

    assert query == SearchQuery(query="weather", event_time=T)
    assert query.count == 1
    assert not query.HasField("count")
    assert not query.HasField("record_id")


def test_csv_strings_are_accepted_for_numeric_fields():
    row = {
        "query": "q",
        "event_time": " 1700000000000",
        "count": "5",
        "record_id": "r1",
    }

    assert parse_search_query(row) == SearchQuery(
        query="q", event_time=T, count=5, record_id="r1"
    )


def test_unknown_fields_are_ignored_and_query_is_stored_as_given():
    query = search(query="  Weather ", country="ch", score=0.5)

    assert query == SearchQuery(query="  Weather ", event_time=T)


def test_invalid_record_is_a_value_error_with_the_reason():
    with pytest.raises(ValueError, match="missing field 'query'"):
        parse_search_query({"event_time": T})


@pytest.mark.parametrize(
    ("value", "millis"),
    [
        ("2024-01-01T00:00:00Z", 1704067200000),
        ("2024-01-01T02:00:00+02:00", 1704067200000),
        ("2024-01-01T00:00:00.123", 1704067200123),  # naive is UTC
        ("2024-01-01 00:00:00.999999+00:00", 1704067200999),
        (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), 1704067200000),
        (dt.datetime(2024, 1, 1, 1), 1704070800000),
        (1704067200000.0, 1704067200000),
        ("+1704067200000", 1704067200000),
    ],
)
def test_event_time_forms(value, millis):
    assert search(event_time=value).event_time == millis


def test_event_time_bounds_are_2000_and_2100_inclusive():
    assert MIN_EVENT_TIME_MS == 946684800000
    assert MAX_EVENT_TIME_MS == 4102444800000
    assert search(event_time=946684800000).event_time == 946684800000
    assert search(event_time=4102444800000).event_time == 4102444800000


@pytest.mark.parametrize(
    "value",
    [
        946684799999,
        4102444800001,
        1700000000,  # seconds, not milliseconds
        1700000000000000,  # microseconds
        -1,
        "1999-12-31T23:59:59Z",
        "2100-01-01T00:00:00.001Z",
        10**40,
    ],
)
def test_absurd_event_times_are_rejected(value):
    assert rejected(parse_search_query, {"query": "q", "event_time": value}) == (
        f"field 'event_time' must be between 2000-01-01 and 2100-01-01 UTC, "
        f"got {value!r}"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("yesterday", "'yesterday'"),
        ("", "''"),
        (True, "True"),
        (1.7e12 + 0.5, "1700000000000.5"),
        ([T], "[1700000000000]"),
        (dt.date(2024, 1, 1), "datetime.date(2024, 1, 1)"),
    ],
)
def test_event_time_of_the_wrong_type_is_rejected(value, shown):
    assert rejected(parse_search_query, {"query": "q", "event_time": value}) == (
        "field 'event_time' must be epoch milliseconds or an ISO-8601 "
        f"timestamp, got {shown}"
    )


def test_huge_bad_values_are_shown_truncated():
    reason = rejected(parse_search_query, {"query": "q", "event_time": "9" * 5000})

    assert reason.startswith("field 'event_time' must be epoch milliseconds")
    assert reason.endswith("got '" + "9" * 59 + "...")


@pytest.mark.parametrize("event_time", [None, "missing"])
def test_missing_event_time(event_time):
    row = (
        {"query": "q"}
        if event_time == "missing"
        else {"query": "q", "event_time": None}
    )
    assert rejected(parse_search_query, row) == "missing field 'event_time'"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"event_time": T}, "missing field 'query'"),
        ({"query": None, "event_time": T}, "missing field 'query'"),
        ({"query": 5, "event_time": T}, "field 'query' must be a string, got int"),
        ({"query": "", "event_time": T}, "field 'query' must be a non-empty string"),
        ({"query": " \t", "event_time": T}, "field 'query' must be a non-empty string"),
        (
            {"query": "x" * 1025, "event_time": T},
            "field 'query' is 1025 characters long, the maximum is 1024",
        ),
        (
            {"query": "bad \ud800", "event_time": T},
            "field 'query' is not valid Unicode text (it contains a lone surrogate)",
        ),
    ],
)
def test_bad_query_field(row, reason):
    assert rejected(parse_search_query, row) == reason


def test_query_of_exactly_the_maximum_length_is_accepted():
    assert search(query="x" * 1024).query == "x" * 1024


@pytest.mark.parametrize("space", [" ", "\t", "\x1c", "\x1f", "\x85", "\u3000"])
def test_numeric_strings_may_be_padded_with_any_whitespace(space):
    # str.strip removes "\x1c" to "\x1f", which int() refuses.
    row = {"query": "q", "event_time": f"{space}{T}{space}", "count": f"{space}3"}
    assert parse_search_query(row) == SearchQuery(query="q", event_time=T, count=3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (1, 1), (7, 7), ("12", 12), (3.0, 3), (2**63 - 1, 2**63 - 1)],
)
def test_good_counts(value, expected):
    assert search(count=value).count == expected


@pytest.mark.parametrize("value", [None, ""])
def test_absent_count_defaults_to_one(value):
    query = search(count=value)

    assert not query.HasField("count")
    assert query.count == 1


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-3, "-3"),
        (-1, "-1"),
        ("-3", "'-3'"),
        ("abc", "'abc'"),
        (True, "True"),
        (2.5, "2.5"),
        (2**63, "9223372036854775808"),
        ([1], "[1]"),
    ],
)
def test_bad_counts(value, shown):
    assert rejected(
        parse_search_query, {"query": "q", "event_time": T, "count": value}
    ) == (f"field 'count' must be a non-negative integer, got {shown}")


def test_empty_record_id_is_left_unset_and_a_number_is_rejected():
    assert not search(record_id="").HasField("record_id")
    assert not search(record_id=None).HasField("record_id")
    assert search(record_id="abc").record_id == "abc"
    assert rejected(
        parse_search_query, {"query": "q", "event_time": T, "record_id": 7}
    ) == ("field 'record_id' must be a string, got int")


def test_query_event_with_all_fields():
    row = {
        "query_id": "q-1",
        "event_time": "2024-01-01T00:00:00Z",
        "query_text": "shoes",
        "advertiser_id": "adv-3",
        "ad_id": "ad-9",
        "record_id": "",
        "extra": 1,
    }

    assert parse_query_event(row) == QueryEvent(
        query_id="q-1",
        event_time=1704067200000,
        query_text="shoes",
        advertiser_id="adv-3",
        ad_id="ad-9",
    )


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"event_time": T}, "missing field 'query_id'"),
        (
            {"query_id": "", "event_time": T},
            "field 'query_id' must be a non-empty string",
        ),
        (
            {"query_id": 12, "event_time": T},
            "field 'query_id' must be a string, got int",
        ),
        ({"query_id": "q"}, "missing field 'event_time'"),
        (
            {"query_id": "q", "event_time": T, "ad_id": 9},
            "field 'ad_id' must be a string, got int",
        ),
    ],
)
def test_bad_query_events(row, reason):
    assert rejected(parse_query_event, row) == reason


def test_click_event_with_all_fields():
    row = {
        "click_id": "c-1",
        "query_id": "q-1",
        "event_time": "1704067200500",
        "ad_id": "ad-9",
        "record_id": "r-1",
    }

    assert parse_click_event(row) == ClickEvent(
        click_id="c-1",
        query_id="q-1",
        event_time=1704067200500,
        ad_id="ad-9",
        record_id="r-1",
    )


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"query_id": "q", "event_time": T}, "missing field 'click_id'"),
        ({"click_id": "c", "event_time": T}, "missing field 'query_id'"),
        (
            {"click_id": "c", "query_id": "q", "event_time": 5},
            "field 'event_time' must be between 2000-01-01 and 2100-01-01 UTC, got 5",
        ),
        (
            {"click_id": "c", "query_id": "q", "event_time": T, "record_id": 1.5},
            "field 'record_id' must be a string, got float",
        ),
    ],
)
def test_bad_click_events(row, reason):
    assert rejected(parse_click_event, row) == reason


# Each parser with a row of every field it reads (CSV gives only strings).
FULL_ROWS = [
    (
        parse_search_query,
        {"query": "q", "event_time": str(T), "record_id": "r", "count": "2"},
    ),
    (
        parse_query_event,
        {
            "query_id": "q",
            "event_time": str(T),
            "query_text": "t",
            "advertiser_id": "a",
            "ad_id": "d",
            "record_id": "r",
        },
    ),  # fmt: skip
    (
        parse_click_event,
        {
            "click_id": "c",
            "query_id": "q",
            "event_time": str(T),
            "ad_id": "d",
            "record_id": "r",
        },
    ),  # fmt: skip
]


@pytest.mark.parametrize(("parser", "row"), FULL_ROWS)
def test_required_fields_are_those_the_parser_cannot_do_without(parser, row):
    # What a CSV header is checked for must be exactly what the parser
    # refuses a row without: no more, or good files would be refused.
    required = required_fields(parser)
    assert set(required) < set(row)
    for name in row:
        rest = {k: v for k, v in row.items() if k != name}
        if name in required:
            assert rejected(parser, rest) == f"missing field {name!r}"
        else:
            parser(rest)


def test_other_parsers_require_nothing_known():
    assert required_fields(lambda row: SearchQuery()) == ()

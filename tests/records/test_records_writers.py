"""to_json_dict, WriteJsonLines, and ParseRecords over in-memory elements."""

import json

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.records import (
    Anomaly,
    AnomalyKind,
    ClickEvent,
    DeadLetter,
    JoinedClick,
    QueryEvent,
    SearchQuery,
)
from transforms.records.parse import parse_search_query
from transforms.records.readers import (
    DEAD_LETTERS,
    RECORDS,
    ParseRecords,
    ReadSearchQueries,
    WriteJsonLines,
    json_line,
    to_json_dict,
)

T = 1700000000000


def test_to_json_dict_keeps_set_fields_in_field_order_with_int64_as_int():
    query = SearchQuery(count=2, event_time=T, query="weather")

    assert to_json_dict(query) == {"query": "weather", "event_time": T, "count": 2}
    assert list(to_json_dict(query)) == ["query", "event_time", "count"]
    assert to_json_dict(SearchQuery()) == {}


def test_to_json_dict_names_enums_encodes_bytes_and_nests_messages():
    anomaly = Anomaly(query="q", kind=AnomalyKind.SPIKE, actual=9, expected=2.5)
    joined = JoinedClick(
        click=ClickEvent(click_id="c", query_id="q1"),
        query=QueryEvent(query_id="q1", event_time=T),
        joined_at=T + 1,
    )

    assert to_json_dict(anomaly) == {
        "query": "q",
        "kind": "SPIKE",
        "actual": 9,
        "expected": 2.5,
    }
    assert to_json_dict(DeadLetter(raw=b"\xff\x00", reason="r")) == {
        "raw": "/wA=",
        "reason": "r",
    }
    assert to_json_dict(joined) == {
        "click": {"click_id": "c", "query_id": "q1"},
        "query": {"query_id": "q1", "event_time": T},
        "joined_at": T + 1,
    }


def test_write_json_lines_then_read_back(tmp_path):
    queries = [
        SearchQuery(query="café", event_time=T, record_id="r1"),
        SearchQuery(query="b", event_time=T + 1, count=3),
    ]
    prefix = str(tmp_path / "out")

    with test_pipeline.TestPipeline() as p:
        _ = p | beam.Create(queries) | WriteJsonLines(prefix)

    written = tmp_path / "out-00000-of-00001.jsonl"
    assert sorted(written.read_text(encoding="utf-8").splitlines()) == [
        '{"query":"b","event_time":1700000000001,"count":3}',
        '{"query":"café","event_time":1700000000000,"record_id":"r1"}',
    ]
    with test_pipeline.TestPipeline() as p:
        out = p | ReadSearchQueries(str(tmp_path / "out-*.jsonl"))
        assert_that(out[RECORDS], equal_to(queries))


def test_write_json_lines_writes_one_line_per_record_across_blocks(tmp_path):
    # More records than one block of lines the sink writes at a time, over
    # several shards: every record on a line of its own, none lost or joined.
    queries = [SearchQuery(query=f"q{i}", event_time=T + i) for i in range(25_000)]
    with test_pipeline.TestPipeline() as p:
        _ = p | beam.Create(queries) | WriteJsonLines(str(tmp_path / "out"), 3)

    lines = [
        line
        for path in sorted(tmp_path.glob("out-*-of-00003.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert sorted(lines) == sorted(json_line(q) for q in queries)


def test_parse_records_over_lines_and_rows_with_counters():
    elements = [
        '{"query": "text line", "event_time": 1700000000000}',
        b'{"query": "bytes line", "event_time": 1700000000000}',
        {"query": "row", "event_time": "1700000000000", "count": "4"},
        "",
        b"  ",
        "{oops",
        b"\xff",
        {"query": "row", "event_time": 1, "when": "then"},
    ]
    p = beam.Pipeline()
    out = (
        p
        | beam.Create(elements)
        | ParseRecords(parse_search_query, SearchQuery, source="memory")
    )
    assert_that(
        out[RECORDS],
        equal_to(
            [
                SearchQuery(query="text line", event_time=T),
                SearchQuery(query="bytes line", event_time=T),
                SearchQuery(query="row", event_time=T, count=4),
            ]
        ),
        label="Records",
    )
    assert_that(
        out[DEAD_LETTERS]
        | beam.Map(lambda d: (d.source, d.HasField("location"), d.reason, d.raw)),
        equal_to(
            [
                (
                    "memory",
                    False,
                    "invalid JSON: Expecting property name enclosed in double "
                    "quotes at column 2",
                    b"{oops",
                ),
                (
                    "memory",
                    False,
                    "invalid UTF-8 at byte 0: invalid start byte",
                    b"\xff",
                ),
                (
                    "memory",
                    False,
                    "field 'event_time' must be between 2000-01-01 and 2100-01-01 "
                    "UTC, got 1",
                    json.dumps(
                        {"query": "row", "event_time": 1, "when": "then"}
                    ).encode(),
                ),
            ]
        ),
        label="DeadLetters",
    )
    result = p.run()
    result.wait_until_finish()

    totals: dict[str, int] = {}
    query = MetricsFilter().with_namespace("millwheel.records")
    for counter in result.metrics().query(query)["counters"]:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + counter.committed
    assert {name: n for name, n in totals.items() if n} == {
        "records_read": 3,
        "blank_lines": 2,
        "dead_letters": 3,
        "dead_letter_invalid_json": 1,
        "dead_letter_invalid_utf8": 1,
        "dead_letter_invalid_field": 1,
    }

"""to_json_dict, json_line, WriteJsonLines, and ParseRecords over in-memory
elements."""

import importlib
import json
import math
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

import transforms.records
from transforms.records import (
    Anomaly,
    AnomalyKind,
    ClickEvent,
    DeadLetter,
    JoinedClick,
    QueryEvent,
    SearchQuery,
    WindowCount,
)
from transforms.records.parse import parse_search_query
from transforms.records.photon_pb2 import JoinerState
from transforms.records.readers import (
    DEAD_LETTERS,
    RECORDS,
    ParseRecords,
    ReadSearchQueries,
    WriteJsonLines,
    json_line,
    to_json_dict,
)
from transforms.records.zeitgeist_pb2 import (
    CLOSED,
    SPIKE,
    DetectorState,
    ModelState,
    ModelUpdate,
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


def test_json_line_writes_compact_json_by_hand():
    count = WindowCount(
        query="weather in paris",
        window_start=1767225600000,
        window_end=1767225900000,
        count=42,
    )
    assert json_line(count) == (
        '{"query":"weather in paris","window_start":1767225600000,'
        '"window_end":1767225900000,"count":42}'
    )
    assert json_line(WindowCount()) == "{}"
    assert json_line(ModelUpdate(new_normal=False, revision=0)) == (
        '{"revision":0,"new_normal":false}'
    )
    assert json_line(DeadLetter(raw=b"", reason="tab\there\x01\x7f")) == (
        '{"raw":"","reason":"tab\\there\\u0001\x7f"}'
    )


def test_json_line_writes_nested_repeated_and_odd_values_by_hand():
    state = DetectorState(
        episode=Anomaly(
            query='a"b\\c\n\u2028😀é',
            kind=SPIKE,
            expected=math.inf,
            score=1e16,
            status=CLOSED,
            peak_deviation=-math.inf,
        ),
        last_window_start=-(2**63),
        dip=-0.0,
        spike=math.nan,
    )
    assert json_line(state) == (
        '{"spike":NaN,"dip":-0.0,"last_window_start":-9223372036854775808,'
        '"episode":{"query":"a\\"b\\\\c\\n\u2028😀é","kind":"SPIKE",'
        '"expected":Infinity,"score":1e+16,"status":"CLOSED",'
        '"peak_deviation":-Infinity}}'
    )
    model = ModelState(
        week_roots=[0.5],
        season_roots=[0.1, math.nan, 5e-324, 2.5],
        history=3,
    )
    assert json_line(model) == (
        '{"history":3,"season_roots":[0.1,NaN,5e-324,2.5],"week_roots":[0.5]}'
    )
    joiner = JoinerState(
        query=QueryEvent(),
        pending=[ClickEvent(click_id="c1"), ClickEvent()],
        seen_click_ids=["c1", ""],
    )
    assert json_line(joiner) == (
        '{"query":{},"pending":[{"click_id":"c1"},{}],"seen_click_ids":["c1",""]}'
    )


def _message_types(descriptor: Descriptor) -> list[Descriptor]:
    return [descriptor] + [
        nested for inner in descriptor.nested_types for nested in _message_types(inner)
    ]


# Every message type of the records package, nested ones (map entries) included.
MESSAGE_TYPES = [
    message_type
    for path in sorted(Path(transforms.records.__file__).parent.glob("*_pb2.py"))
    for top in importlib.import_module(
        f"transforms.records.{path.stem}"
    ).DESCRIPTOR.message_types_by_name.values()
    for message_type in _message_types(top)
]

F = FieldDescriptor
# Bits and signedness of each integer field type.
_INTS = {
    F.TYPE_INT32: (32, True),
    F.TYPE_SINT32: (32, True),
    F.TYPE_SFIXED32: (32, True),
    F.TYPE_UINT32: (32, False),
    F.TYPE_FIXED32: (32, False),
    F.TYPE_INT64: (64, True),
    F.TYPE_SINT64: (64, True),
    F.TYPE_SFIXED64: (64, True),
    F.TYPE_UINT64: (64, False),
    F.TYPE_FIXED64: (64, False),
}
# Characters JSON escapes or could trip an encoder; protobuf refuses lone
# surrogates in strings, so they cannot reach json_line.
_ODD_CHARS = '"\\/\x00\x1f\x7f\x80\u2028\u2029\ufeff\uffff😀\U0010ffff'
_TEXT = st.text(
    st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(_ODD_CHARS)),
    max_size=12,
)
_ODD_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1e16, 0.1, 1e22]


def _ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    low, high = (
        (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    )
    edges = [v for v in (0, 1, -1, low, high) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _values(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    """One value of `field` (an item, if repeated)."""
    if field.type == F.TYPE_MESSAGE:
        return st.deferred(lambda: _messages(field.message_type))
    if field.type == F.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if field.type == F.TYPE_STRING:
        return _TEXT
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=12)
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.one_of(st.sampled_from(_ODD_FLOATS), st.floats())
    return _ints(*_INTS[field.type])


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


@st.composite
def _messages(draw: st.DrawFn, descriptor: Descriptor) -> Message:
    """A message of `descriptor`'s type with some fields set (maybe none)."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if _is_map(field):
            entry = field.message_type.fields_by_name
            values = st.dictionaries(
                _values(entry["key"]), _values(entry["value"]), max_size=2
            )
            getattr(message, field.name).update(draw(values))
        elif field.is_repeated:
            items = draw(st.lists(_values(field), max_size=3))
            if field.type == F.TYPE_MESSAGE:
                for item in items:
                    getattr(message, field.name).add().MergeFrom(item)
            else:
                getattr(message, field.name).extend(items)
        elif draw(st.booleans()):
            value = draw(_values(field))
            if field.type == F.TYPE_MESSAGE:
                # Set even when empty: it is then written as {}.
                getattr(message, field.name).SetInParent()
                getattr(message, field.name).MergeFrom(value)
            else:
                setattr(message, field.name, value)
    return message


def _written(message: Message, write: Any) -> tuple[str, Any]:
    # What `write` makes of it, or the type of error it raises: both must
    # fail alike (an enum number without a name).
    try:
        return "line", write(message)
    except Exception as e:
        return "raises", type(e)


def _reference_line(message: Message) -> str:
    return json.dumps(to_json_dict(message), ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("descriptor", MESSAGE_TYPES, ids=lambda d: d.full_name)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_json_line_is_json_dumps_of_to_json_dict(descriptor, data):
    message = data.draw(_messages(descriptor))

    assert _written(message, json_line) == _written(message, _reference_line)


def test_a_map_is_an_object_in_key_order_that_parses_back():
    state = JoinerState()
    state.occurrences["q2"] = "2024"
    state.occurrences["q1"] = "2023"
    line = json_line(state)
    assert line == '{"occurrences":{"q1":"2023","q2":"2024"}}'
    assert json_format.ParseDict(json.loads(line), JoinerState()) == state


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

"""Every record message has a registered ProtoCoder that round-trips it."""

import apache_beam as beam
import pytest

import transforms.records as records
from transforms.records import (
    Anomaly,
    AnomalyKind,
    ClickEvent,
    DeadLetter,
    JoinedClick,
    ModelUpdate,
    QueryEvent,
    SearchQuery,
    WindowCount,
    WindowScore,
    dead_letter_pb2,
    photon_pb2,
    zeitgeist_pb2,
)
from transforms.records.coders import MESSAGE_TYPES

CLICK = ClickEvent(
    click_id="c1", query_id="q1", event_time=1700000000500, ad_id="ad9", record_id="r"
)
QUERY = QueryEvent(
    query_id="q1",
    event_time=1700000000000,
    query_text="cheap flights",
    advertiser_id="adv",
    ad_id="ad9",
    record_id="r0",
)
SAMPLES = [
    SearchQuery(query="weather", event_time=1700000000000, record_id="r1", count=4),
    WindowCount(
        query="weather",
        window_start=1700000000000,
        window_end=1700000060000,
        count=12,
        revision=1,
    ),
    ModelUpdate(
        query="weather",
        window_start=1700000000000,
        window_end=1700000060000,
        actual=12,
        expected=9.5,
        stddev=1.25,
        revision=0,
    ),
    Anomaly(
        query="weather",
        kind=AnomalyKind.DIP,
        window_start=1700000000000,
        window_end=1700000060000,
        actual=0,
        expected=40.0,
        score=1.0,
    ),
    WindowScore(
        query="weather",
        window_start=1700000000000,
        window_end=1700000060000,
        actual=3,
        expected=2.0,
        stddev=0.5,
        score=0.25,
        spike_confidence=0.25,
        dip_confidence=0.0,
    ),
    QUERY,
    CLICK,
    JoinedClick(click=CLICK, query=QUERY, joined_at=1700000001000),
    DeadLetter(
        source="in.jsonl",
        location="line 3",
        raw=b"\xff\x00{",
        reason="invalid UTF-8 at byte 0: invalid start byte",
        record_type="SearchQuery",
    ),
]


def test_package_exports_every_message_class():
    generated = {
        **{name: getattr(zeitgeist_pb2, name) for name in ZEITGEIST_MESSAGES},
        **{name: getattr(photon_pb2, name) for name in PHOTON_MESSAGES},
        "DeadLetter": dead_letter_pb2.DeadLetter,
    }
    for name, message in generated.items():
        assert name in records.__all__
        assert getattr(records, name) is message, name


ZEITGEIST_MESSAGES = (
    "SearchQuery",
    "WindowCount",
    "ModelUpdate",
    "Anomaly",
    "AnomalyKind",
    "WindowScore",
)
PHOTON_MESSAGES = ("QueryEvent", "ClickEvent", "JoinedClick")


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_registered_coder_is_a_proto_coder_that_round_trips(message):
    coder = beam.coders.registry.get_coder(type(message))

    assert isinstance(coder, beam.coders.ProtoCoder)
    assert coder.proto_message_type is type(message)
    assert coder.decode(coder.encode(message)) == message


def test_unset_count_survives_encoding_as_unset_with_default_one():
    coder = beam.coders.registry.get_coder(SearchQuery)

    decoded = coder.decode(coder.encode(SearchQuery(query="q", event_time=1)))

    assert not decoded.HasField("count")
    assert decoded.count == 1


def test_every_generated_message_has_a_registered_proto_coder():
    assert {type(sample) for sample in SAMPLES} <= set(MESSAGE_TYPES)
    for message_type in MESSAGE_TYPES:
        coder = beam.coders.registry.get_coder(message_type)
        assert coder == beam.coders.ProtoCoder(message_type)

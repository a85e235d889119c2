"""Mistakes a job that imports `PhotonJoin` can make, caught where they are
made: parameters when made, the shape and windowing of the input at expand,
and elements of the wrong kind or unit as dead letters with the reason
(against the real Bigtable emulator)."""

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows

from testing.scenarios import timestamped
from tests.photon.joining import DAY, T0, click, pipeline, query, target_of
from transforms.photon import (
    DEAD_LETTERS,
    JOINED,
    BigtableTarget,
    JoinParams,
    PhotonJoin,
    RegistryLayout,
    RegistryParams,
)
from transforms.records.photon_pb2 import ClickEvent, QueryEvent

TARGET = BigtableTarget("p", "i")
REGISTRY = RegistryParams(now_ms=T0 + DAY)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: RegistryParams(now_ms=1_767_571_200), ValueError, "milliseconds"),
        (
            lambda: RegistryParams(layout=(8, 60_000)),
            TypeError,
            "layout must be a RegistryLayout",
        ),
        (
            lambda: BigtableTarget("p", "i", "t", "t"),
            ValueError,
            "must differ, both are 't'",
        ),
        (
            lambda: BigtableTarget("p", "i", "my table!"),
            ValueError,
            "not a Bigtable table id",
        ),
        (lambda: BigtableTarget("", "i"), ValueError, "must be named"),
        (
            lambda: JoinParams(max_wait_ms=60_000, timer_slot_ms=120_000),
            ValueError,
            "timer_slot_ms",
        ),
        (
            lambda: PhotonJoin(JoinParams(), "east", TARGET),
            TypeError,
            "target must be a BigtableTarget, got JoinParams",
        ),
        (
            lambda: PhotonJoin(TARGET, "east", RegistryParams(), JoinParams()),
            TypeError,
            "join must be a JoinParams",
        ),
    ],
)
def test_parameters_are_checked_when_they_are_made(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_registry_layout_and_a_clock_in_milliseconds_pass():
    registry = RegistryParams(now_ms=T0, layout=RegistryLayout(buckets=4))
    assert registry.layout.buckets == 4


def streams(p):
    events = [query("q1", T0), click("c1", "q1", T0 + 1_000)]
    source = p | beam.Create(timestamped(events, lambda e: e.event_time))
    queries = source | "Q" >> beam.Filter(lambda e: isinstance(e, QueryEvent))
    clicks = source | "C" >> beam.Filter(lambda e: isinstance(e, ClickEvent))
    return queries, clicks


def test_the_input_must_be_a_pair_of_collections():
    p = pipeline()
    queries, clicks = streams(p)
    with pytest.raises(TypeError, match=r"pair \(queries, clicks\)"):
        [queries, clicks] | PhotonJoin(TARGET, "east")


def test_windowed_input_is_refused_at_expand():
    # Per-window joiner state would join a click seen in two windows twice.
    p = pipeline()
    queries, clicks = streams(p)
    windowed = clicks | beam.WindowInto(FixedWindows(60))
    with pytest.raises(ValueError, match="global window.*joined twice"):
        (queries, windowed) | PhotonJoin(TARGET, "east")


@pytest.mark.bigtable
def test_wrong_kinds_and_units_are_dead_letters_and_the_rest_joins(
    bigtable_instance,
):
    good_query, good_click = query("q1", T0), click("c1", "q1", T0 + 1_000)
    in_seconds = click("c2", "q1", T0 // 1000)
    # A click in the query stream and a dict in the click stream, as a
    # job that splits one log wrongly would send them.
    query_stream = [good_query, good_click]
    click_stream = [good_click, in_seconds, {"click_id": "c3"}]
    with pipeline() as p:
        queries = p | "Queries" >> beam.Create(
            timestamped(query_stream, lambda e: e.event_time)
        )
        clicks = (
            p
            | "Clicks" >> beam.Create(click_stream)
            | beam.Map(lambda e: beam.window.TimestampedValue(e, T0 / 1000))
        )
        outputs = (queries, clicks) | PhotonJoin(
            target_of(bigtable_instance), "east", registry=REGISTRY
        )
        reasons = outputs[DEAD_LETTERS] | beam.Map(lambda d: (d.record_type, d.reason))
        assert_that(
            reasons,
            equal_to(
                [
                    ("QueryEvent", "expected a QueryEvent, got a ClickEvent"),
                    ("ClickEvent", "expected a ClickEvent, got a dict"),
                    (
                        "ClickEvent",
                        "field 'event_time' must be between 2000-01-01 and "
                        f"2100-01-01 UTC, got {T0 // 1000}",
                    ),
                ]
            ),
            label="DeadLetters",
        )
        joined = outputs[JOINED] | beam.Map(lambda j: j.click.click_id)
        assert_that(joined, equal_to(["c1"]), label="Joined")

"""WindowCounter's watermark semantics, on TestStream and the DirectRunner."""

import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that

from testing.scenarios import ZeitgeistScenario
from tests.zeitgeist.streaming import (
    MINUTE,
    T0,
    expect,
    streaming_pipeline,
    window_index,
)
from transforms.millwheel.lateness import LateDataPolicy, LatePolicy
from transforms.zeitgeist.composite import (
    DEAD_LETTERS,
    LATE_RECORDS,
    WINDOW_COUNTS,
    Zeitgeist,
)
from transforms.zeitgeist.params import WindowParams

# The same assertions on the DirectRunner and on SparkRunner.
pytestmark = pytest.mark.both_runners


def counts(params, scenario):
    """Run Zeitgeist; return its outputs inside an open pipeline context."""
    pipeline = streaming_pipeline()
    outputs = pipeline | scenario.build() | Zeitgeist(window=params)
    return pipeline, outputs


def as_row(window):
    return (
        window.query,
        window_index(window.window_start),
        window.count,
        window.revision,
    )


def test_window_is_emitted_only_once_the_watermark_passes_its_end():
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=0)
    scenario = (
        ZeitgeistScenario()
        .add("q", T0 + 1_000)
        .add("q", T0 + 2_000)
        # The watermark reaches the last millisecond of window 0: it is open.
        .advance_watermark(T0 + MINUTE - 1)
        .add("q", T0 + 59_000)
        # Now the watermark is at the end: window 0 is out, a later search
        # of it is late and must not change what was emitted.
        .advance_watermark(T0 + MINUTE)
        .add("q", T0 + 30_000)
        .advance_watermark(T0 + 5 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(outputs[WINDOW_COUNTS], [("q", 0, 3, 0)], as_row, "Windows")
        expect(outputs[LATE_RECORDS], [30_000], lambda s: s.event_time - T0, "Late")


def test_idle_query_stops_producing_windows_after_the_horizon():
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=3)
    scenario = (
        ZeitgeistScenario().add("q", T0 + 10).advance_watermark(T0 + 100 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[WINDOW_COUNTS],
            [("q", 0, 1, 0), ("q", 1, 0, 0), ("q", 2, 0, 0), ("q", 3, 0, 0)],
            as_row,
            "Windows",
        )


def test_reported_zero_counts_keep_a_query_active_past_the_horizon():
    # A pre-aggregated feed sends count 0 for quiet buckets: those windows are
    # data, so the query stays active through them and its horizon counts
    # from the last reported window, not the last search.
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=1)
    scenario = ZeitgeistScenario().add("q", T0, count=4)
    for index in range(1, 5):
        scenario.add("q", T0 + index * MINUTE, count=0)
    scenario.advance_watermark(T0 + 20 * MINUTE)
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[WINDOW_COUNTS],
            [("q", 0, 4, 0)] + [("q", i, 0, 0) for i in range(1, 6)],
            as_row,
            "Windows",
        )


def test_negative_counts_are_dead_letters_and_zero_is_not():
    scenario = (
        ZeitgeistScenario()
        .add("q", T0, count=0)
        .add("q", T0 + 1, count=-2)
        .advance_watermark(T0 + 5 * MINUTE)
    )
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=0)
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[DEAD_LETTERS],
            ["count must be a non-negative integer, got -2"],
            lambda dead: dead.reason,
            "Dead",
        )
        expect(outputs[WINDOW_COUNTS], [("q", 0, 0, 0)], as_row, "Windows")


def test_query_returning_after_idling_resumes_without_filling_the_gap():
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=1)
    scenario = (
        ZeitgeistScenario()
        .add("q", T0)
        .advance_watermark(T0 + 10 * MINUTE)
        .add("q", T0 + 20 * MINUTE)
        .add("q", T0 + 20 * MINUTE + 5)
        .advance_watermark(T0 + 30 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[WINDOW_COUNTS],
            [("q", 0, 1, 0), ("q", 1, 0, 0), ("q", 20, 2, 0), ("q", 21, 0, 0)],
            as_row,
            "Windows",
        )


def test_keys_are_normalised_and_counted_apart():
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=0)
    scenario = (
        ZeitgeistScenario()
        .add("Beam  Runner", T0)
        .add("beam runner ", T0 + 1)
        .add("spark", T0 + 2, count=5)
        .advance_watermark(T0 + 2 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[WINDOW_COUNTS],
            [("beam runner", 0, 2, 0), ("spark", 0, 5, 0)],
            as_row,
            "Windows",
        )


def test_drop_policy_sends_late_records_to_the_late_output():
    late_data = LateDataPolicy(LatePolicy.DROP, allowed_lateness_ms=10 * MINUTE)
    params = WindowParams(
        size_ms=MINUTE, activity_horizon_windows=0, late_data=late_data
    )
    scenario = (
        ZeitgeistScenario()
        .add("q", T0 + 5)
        .advance_watermark(T0 + 2 * MINUTE)
        .add("q", T0 + 6)
        .advance_watermark(T0 + 4 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(outputs[WINDOW_COUNTS], [("q", 0, 1, 0)], as_row, "Windows")
        expect(outputs[LATE_RECORDS], [6], lambda s: s.event_time - T0, "Late")


def test_correct_policy_re_emits_the_window_with_a_revision_within_lateness():
    late_data = LateDataPolicy(LatePolicy.CORRECT, allowed_lateness_ms=3 * MINUTE)
    params = WindowParams(
        size_ms=MINUTE, activity_horizon_windows=0, late_data=late_data
    )
    scenario = (
        ZeitgeistScenario()
        .add("q", T0 + 5)
        .add("q", T0 + 7)
        .advance_watermark(T0 + 2 * MINUTE)
        # Window 0 ended 1-2 minutes ago: within the 3 minutes allowed.
        .add("q", T0 + 6, count=4)
        .advance_watermark(T0 + 5 * MINUTE)
        .add("q", T0 + 8)
        .advance_watermark(T0 + 7 * MINUTE)
    )
    pipeline, outputs = counts(params, scenario)
    with pipeline:
        expect(
            outputs[WINDOW_COUNTS],
            [("q", 0, 2, 0), ("q", 0, 6, 1)],
            as_row,
            "Windows",
        )
        # The last search came 4 minutes after window 0 closed: too late.
        expect(outputs[LATE_RECORDS], [8], lambda s: s.event_time - T0, "Late")


@pytest.mark.parametrize("seed", [1, 2])
def test_out_of_order_within_lateness_gives_the_in_order_counts(seed):
    rng = random.Random(seed)
    events = [
        ("q" if rng.random() < 0.7 else "r", T0 + rng.randrange(12 * MINUTE))
        for _ in range(300)
    ]
    expected = {}
    for query, time in events:
        key = (query, (time - T0) // MINUTE)
        expected[key] = expected.get(key, 0) + 1

    late_data = LateDataPolicy(LatePolicy.CORRECT, allowed_lateness_ms=5 * MINUTE)
    params = WindowParams(
        size_ms=MINUTE, activity_horizon_windows=0, late_data=late_data
    )
    scenario = ZeitgeistScenario()
    # Arrival is shuffled, and the watermark advances in steps while events
    # are still arriving: some come after their window has been emitted, but
    # never by more than 4 minutes, inside the allowed 5.
    arrival = sorted(events, key=lambda e: e[1] + rng.randrange(4 * MINUTE))
    for step in range(len(arrival) // 30):
        for query, time in arrival[step * 30 : (step + 1) * 30]:
            scenario.add(query, time)
        newest = max(t for _, t in arrival[: (step + 1) * 30])
        watermark = newest - 4 * MINUTE
        if scenario.watermark_ms is None or watermark > scenario.watermark_ms:
            scenario.advance_watermark(watermark)
    for query, time in arrival[(len(arrival) // 30) * 30 :]:
        scenario.add(query, time)

    pipeline, outputs = counts(params, scenario)

    def final_counts_match(windows):
        latest = {}
        for query, index, count, revision in windows:
            if revision >= latest.get((query, index), (-1, 0))[0]:
                latest[(query, index)] = (revision, count)
        final = {key: count for key, (_, count) in latest.items()}
        assert final == expected

    with pipeline:
        assert_that(outputs[WINDOW_COUNTS] | beam.Map(as_row), final_counts_match)
        expect(outputs[LATE_RECORDS], [], lambda s: s, "NothingLate")


def test_resent_searches_are_counted_once_with_dedup():
    params = WindowParams(size_ms=MINUTE, activity_horizon_windows=0)
    scenario = (
        ZeitgeistScenario()
        .add("q", T0 + 5, record_id="a")
        .add("q", T0 + 6, record_id="b")
        .add("q", T0 + 5, record_id="a")
        # Pre-aggregated counts have no id: never deduplicated.
        .add("q", T0 + 7, count=3, record_id="")
        .add("q", T0 + 7, count=3, record_id="")
        .advance_watermark(T0 + 2 * MINUTE)
    )
    pipeline = streaming_pipeline()
    outputs = (
        pipeline
        | scenario.build()
        | Zeitgeist(window=params, dedup_horizon_ms=10 * MINUTE)
    )
    with pipeline:
        expect(outputs[WINDOW_COUNTS], [("q", 0, 8, 0)], as_row, "Windows")

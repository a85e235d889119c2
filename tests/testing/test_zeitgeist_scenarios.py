"""TestStream scenarios run through small streaming pipelines on the DirectRunner."""

from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.coders import ProtoCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import TimerSpec, on_timer
from apache_beam.transforms.window import FixedWindows
from apache_beam.utils.timestamp import Duration, Timestamp

from testing.scenarios import ZeitgeistScenario, from_generated, timestamped
from testing.zeitgeist_generator import HOUR_MS, MINUTE_MS, StreamSpec, generate
from transforms.records import zeitgeist_pb2

# The same assertions on the DirectRunner and on SparkRunner.
pytestmark = pytest.mark.both_runners

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z, a window boundary
W = 5 * MINUTE_MS


class WindowIndex(beam.DoFn):
    """(query, window index from T0, sum) for readable expectations."""

    def process(self, element, window=beam.DoFn.WindowParam):
        query, total = element
        yield query, (window.start.micros // 1000 - T0) // W, total


def run_counts(test_stream, expected):
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=options) as pipeline:
        counts = (
            pipeline
            | test_stream
            | beam.Map(lambda record: (record.query, record.count))
            | beam.WindowInto(FixedWindows(W / 1000))
            | beam.CombinePerKey(sum)
            | beam.ParDo(WindowIndex())
        )
        assert_that(counts, equal_to(expected))


def test_counts_per_window_and_late_records_dropped():
    scenario = (
        ZeitgeistScenario()
        .add("a", T0 + 1_000)
        .add("a", T0 + 2_000, count=3)
        .add("b", T0 + W + 5)
        .advance_watermark(T0 + W + 10)
        # Window 0 closed at T0 + W: this one is late and dropped.
        .add("a", T0 + 3)
        .add("a", T0 + W + 20)
    )
    run_counts(scenario.build(), [("a", 0, 4), ("a", 1, 1), ("b", 1, 1)])


class FireLater(beam.DoFn):
    """Sets one event-time timer ten minutes after each key's element."""

    TIMER = TimerSpec("later", TimeDomain.WATERMARK)

    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        timer=beam.DoFn.TimerParam(TIMER),
    ):
        timer.set(timestamp + Duration(seconds=600))

    @on_timer(TIMER)
    def fired(self, key=beam.DoFn.KeyParam):
        yield key


def test_timers_pending_at_the_end_still_fire():
    scenario = ZeitgeistScenario().add("a", T0).add("b", T0 + W).advance_watermark(T0)
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=options) as pipeline:
        fired = (
            pipeline
            | scenario.build()
            | beam.Map(lambda record: (record.query, record.count))
            | beam.ParDo(FireLater())
        )
        assert_that(fired, equal_to(["a", "b"]))


def test_the_stream_uses_the_search_query_proto_coder():
    stream = ZeitgeistScenario().add("a", T0).build()
    assert isinstance(stream.coder, ProtoCoder)
    record = zeitgeist_pb2.SearchQuery(query="a", event_time=T0, record_id="r")
    assert stream.coder.decode(stream.coder.encode(record)) == record


def test_default_record_ids_are_unique_and_records_are_copied():
    record = zeitgeist_pb2.SearchQuery(query="x", event_time=T0 + 1, record_id="given")
    scenario = ZeitgeistScenario().add("a", T0).add("a", T0).add_record(record)
    record.query = "changed"
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=options) as pipeline:
        seen = (
            pipeline
            | scenario.build()
            | beam.Map(
                lambda r, ts=beam.DoFn.TimestampParam: (r.record_id, r.query, ts)
            )
        )
        assert_that(
            seen,
            equal_to(
                [
                    ("scenario-0", "a", Timestamp(micros=T0 * 1000)),
                    ("scenario-1", "a", Timestamp(micros=T0 * 1000)),
                    ("given", "x", Timestamp(micros=(T0 + 1) * 1000)),
                ]
            ),
        )


def test_the_watermark_must_increase():
    scenario = ZeitgeistScenario().advance_watermark(T0)
    with pytest.raises(ValueError, match="watermark must increase"):
        scenario.advance_watermark(T0)


def test_timestamped_converts_milliseconds():
    values = timestamped([1_500, 2_000], lambda ms: ms)
    assert [v.timestamp for v in values] == [Timestamp(1.5), Timestamp(2)]
    assert [v.value for v in values] == [1_500, 2_000]


def test_generated_late_records_arrive_behind_the_watermark():
    spec = StreamSpec(
        num_queries=3,
        duration_ms=2 * HOUR_MS,
        base_rate=6.0,
        episodes_per_query_day=0.0,
        out_of_order_fraction=0.2,
        late_fraction=0.1,
        duplicate_fraction=0.05,
    )
    stream = generate(spec, seed=3)
    assert stream.is_late.any() and stream.is_duplicate.any()
    on_time, every = Counter(), Counter()
    for record, late in zip(stream.events, stream.is_late, strict=True):
        cell = (record.query, (record.event_time - T0) // W)
        every[cell] += record.count
        if not late:
            on_time[cell] += record.count
    # Late delays exceed the lag plus a window, so their windows are closed
    # and Beam drops them; duplicates are still counted, nothing dedups here.
    assert on_time != every
    run_counts(
        from_generated(stream, batch_size=40),
        [(query, window, total) for (query, window), total in on_time.items()],
    )

"""DedupByRecordId: exact dedup, counting, and ids forgotten after the horizon."""

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

# Aliased so that pytest does not try to collect them as test classes.
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.test_stream import TestStream as BeamStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from transforms.millwheel.dedup import DedupByRecordId

# The same assertions on the DirectRunner and on SparkRunner.
pytestmark = pytest.mark.both_runners

SECOND = 1000  # ms


def _event(key, record_id, at_seconds):
    return TimestampedValue((key, {"id": record_id}), at_seconds)


def _create(pipeline, events):
    """A bounded PCollection of timestamped events (Create alone drops them)."""
    return (
        pipeline
        | beam.Create([(tv.value, tv.timestamp) for tv in events])
        | beam.MapTuple(TimestampedValue)
    )


def _record_id(record):
    return record["id"]


def _streaming_pipeline():
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return BeamPipeline(options=options)


def _counter(result, name):
    query = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed for c in query)


def _run(pipeline):
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _ids(pcoll, label):
    return pcoll | label >> beam.Map(lambda kv: (kv[0], kv[1]["id"]))


def _times(pcoll, label):
    """The event times, in whole seconds, of a PCollection's elements."""
    return pcoll | label >> beam.Map(lambda _, ts=beam.DoFn.TimestampParam: int(ts))


def test_batch_duplicates_are_dropped_counted_and_emitted():
    pipeline = BeamPipeline()
    events = _create(
        pipeline,
        [
            _event("q1", "a", 1),
            _event("q1", "b", 2),
            _event("q1", "a", 3),
            _event("q1", "a", 4),
            _event("q2", "a", 5),  # same id, other key: not a duplicate
        ],
    )
    out = events | DedupByRecordId(
        _record_id, horizon_ms=60 * SECOND, emit_duplicates=True
    )

    assert_that(
        _ids(out.unique, "UniqueIds"),
        equal_to([("q1", "a"), ("q1", "b"), ("q2", "a")]),
        label="Unique",
    )
    assert_that(
        _ids(out.duplicates, "DuplicateIds"),
        equal_to([("q1", "a"), ("q1", "a")]),
        label="Duplicates",
    )
    result = _run(pipeline)
    assert _counter(result, "duplicates") == 2


def test_batch_copies_further_apart_than_the_horizon_each_pass():
    # Before, an id was remembered until the watermark passed its horizon,
    # which in batch it does only at the end: copies hours apart were
    # dropped in batch and counted live. Now the event times decide. Which
    # copy of a close pair passes depends on the order they are read in.
    minute, hour = 60, 3600
    searches = {  # id -> the searches' copies, minutes apart within a search
        "far": [[1 * hour, 1 * hour + 9 * minute], [4 * hour, 4 * hour + 5 * minute]],
        "near": [[2 * hour, 2 * hour - 10 * minute]],  # 10 min: the horizon
    }
    pipeline = BeamPipeline()
    events = _create(
        pipeline,
        [
            _event("q", record_id, at)
            for record_id, copies in searches.items()
            for search in copies
            for at in search
        ],
    )
    out = events | DedupByRecordId(
        _record_id, horizon_ms=10 * 60 * SECOND, emit_duplicates=True
    )

    def one_of_each_search(times):
        passed = sorted(
            (record_id, i)
            for record_id, copies in searches.items()
            for i, search in enumerate(copies)
            for at in search
            if at in times
        )
        assert passed == [("far", 0), ("far", 1), ("near", 0)], times

    assert_that(_times(out.unique, "UniqueTimes"), one_of_each_search, label="U")
    assert_that(
        _times(out.duplicates, "DuplicateTimes") | beam.combiners.Count.Globally(),
        equal_to([3]),
        label="Duplicates",
    )
    _run(pipeline)


def test_unique_records_keep_their_timestamps():
    pipeline = BeamPipeline()
    unique = _create(pipeline, [_event("q", "a", 7), _event("q", "b", 9)]) | (
        DedupByRecordId(_record_id, horizon_ms=60 * SECOND)
    )
    assert_that(_times(unique, "Times"), equal_to([7, 9]))
    _run(pipeline)


def test_streaming_ids_are_forgotten_after_the_horizon():
    # horizon 40 s: "a" at 12 s is remembered until the watermark passes 52 s.
    stream = (
        BeamStream()
        .add_elements([_event("q", "a", 12)])
        .advance_watermark_to(30)
        .add_elements([_event("q", "a", 31)])  # duplicate: dropped
        .advance_watermark_to(51)
        .add_elements([_event("q", "a", 51)])  # still within the horizon: dropped
        .advance_watermark_to(53)
        .add_elements([_event("q", "a", 54)])  # forgotten: new again
        .advance_watermark_to(200)
        .advance_watermark_to_infinity()
    )
    pipeline = _streaming_pipeline()
    out = (
        pipeline
        | stream
        | DedupByRecordId(_record_id, horizon_ms=40 * SECOND, emit_duplicates=True)
    )
    assert_that(_times(out.unique, "U"), equal_to([12, 54]), label="Unique")
    # Counted too, but the streaming DirectRunner reports only the first
    # bundle's metrics, so the duplicates output is what is checked here.
    assert_that(_times(out.duplicates, "D"), equal_to([31, 51]), label="Dups")
    _run(pipeline)


def test_streaming_gc_forgets_only_expired_ids():
    # "old" (at 5 s) expires at 45 s, "new" (at 35 s) at 75 s. After the
    # watermark passes 45 s only "old" is forgotten.
    stream = (
        BeamStream()
        .add_elements([_event("q", "old", 5), _event("q", "new", 35)])
        .advance_watermark_to(55)
        .add_elements([_event("q", "old", 56), _event("q", "new", 57)])
        .advance_watermark_to(200)
        .advance_watermark_to_infinity()
    )
    pipeline = _streaming_pipeline()
    out = (
        pipeline
        | stream
        | DedupByRecordId(_record_id, horizon_ms=40 * SECOND, emit_duplicates=True)
    )
    assert_that(
        _ids(out.unique, "UniqueIds"),
        equal_to([("q", "old"), ("q", "new"), ("q", "old")]),
        label="Unique",
    )
    assert_that(
        _ids(out.duplicates, "DuplicateIds"), equal_to([("q", "new")]), label="Dups"
    )
    _run(pipeline)


def test_a_busy_key_keeps_every_id_apart():
    # 300 ids on one key, as a popular query's searches within a horizon;
    # each id once, but for two sent again and one sent under another key.
    ids = [f"id-{i}" for i in range(300)]
    events = [_event("q", i, n % 60) for n, i in enumerate(ids)]
    events += [_event("q", "id-3", 50), _event("q", "id-299", 51)]
    events += [_event("other", "id-7", 52)]
    pipeline = BeamPipeline()
    unique = _create(pipeline, events) | DedupByRecordId(
        _record_id, horizon_ms=3600 * SECOND
    )
    expected = [("q", i) for i in ids] + [("other", "id-7")]
    assert_that(_ids(unique, "Ids"), equal_to(expected))
    result = _run(pipeline)
    assert _counter(result, "duplicates") == 2


def test_integer_and_bytes_ids_are_accepted():
    pipeline = BeamPipeline()
    unique = (
        pipeline
        | beam.Create([("k", 7), ("k", 7), ("k", 8)])
        | DedupByRecordId(lambda record: record, horizon_ms=SECOND)
    )
    assert_that(unique, equal_to([("k", 7), ("k", 8)]))
    _run(pipeline)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"horizon_ms": 0}, "horizon_ms"),
        ({"horizon_ms": -5}, "horizon_ms"),
    ],
)
def test_bad_parameters_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DedupByRecordId(_record_id, **kwargs)

"""SparkRunner streaming semantics that Beam's suites do not pin down:
processing-time timers with no input, allowed lateness across batches,
metrics of a running and a finished job, cancel, an idle source, a
foreign checkpoint, and a temporary one."""

from __future__ import annotations

import functools
import json
import logging
import pathlib
import tempfile
import time

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.fileio import MatchContinuously
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import FixedWindows, GlobalWindows, TimestampedValue
from apache_beam.utils.timestamp import Duration

from runners.spark import SparkRunner
from runners.spark.checkpoint import CheckpointMismatch, CheckpointUnusable
from transforms.millwheel.state_params import apply_with_state_params
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.json_parts import WriteJsonLineParts
from transforms.records.readers import RECORDS

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]


def _pipeline(tmp_path, *extra: str) -> beam.Pipeline:
    options = PipelineOptions(
        ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}", *extra]
    )
    return beam.Pipeline(runner=SparkRunner(), options=options)


def _append_line(path, line) -> None:
    """A sink the test reads back: one line per element, from any worker."""
    with open(path, "a") as out:
        out.write(f"{line}\n")


def _wait_for_lines(path, lines: int, timeout_s: float = 60) -> None:
    """Waits until a running job has written ``lines`` lines to ``path``
    (or the timeout passes: the test's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (
        not path.exists() or len(path.read_text().split()) < lines
    ):
        time.sleep(0.1)


class RemindLater(beam.DoFn):
    """Sets a processing-time timer 5 s after the element; says so when due."""

    SEEN = ReadModifyWriteStateSpec("seen", VarIntCoder())
    REMINDER = TimerSpec("reminder", TimeDomain.REAL_TIME)

    def process(
        self,
        element,
        seen=beam.DoFn.StateParam(SEEN),
        reminder=beam.DoFn.TimerParam(REMINDER),
    ):
        seen.write(element[1])
        # TestStream's processing time starts at 0.
        reminder.set(5)

    @on_timer(REMINDER)
    def remind(self, key=beam.DoFn.KeyParam, seen=beam.DoFn.StateParam(SEEN)):
        yield key, seen.read()


def test_processing_time_timer_fires_with_no_input_arriving(tmp_path):
    stream = (
        TestStream()
        .add_elements([("a", 1), ("b", 2)])
        .advance_processing_time(3)  # not due yet
        .advance_processing_time(3)  # due at 6 > 5, and nothing arrives
        .advance_watermark_to_infinity()
    )
    with _pipeline(tmp_path) as p:
        reminded = p | stream | beam.ParDo(RemindLater())
        assert_that(reminded, equal_to([("a", 1), ("b", 2)]))


def test_late_data_across_batches_follows_allowed_lateness(tmp_path):
    stream = (
        TestStream()
        .add_elements([TimestampedValue(("k", 1), 1), TimestampedValue(("k", 2), 2)])
        .advance_watermark_to(15)  # window [0, 10) is on time, in its own batch
        .add_elements([TimestampedValue(("k", 3), 3)])  # late, within 20 s
        .advance_watermark_to(40)  # window [0, 10) is past its lateness
        .add_elements([TimestampedValue(("k", 4), 4)])  # too late: dropped
        .advance_watermark_to_infinity()
    )
    with _pipeline(tmp_path) as p:
        panes = (
            p
            | stream
            | beam.WindowInto(
                FixedWindows(10),
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=20,
            )
            | beam.GroupByKey()
            | beam.Map(
                lambda kv, pane=beam.DoFn.PaneInfoParam: (sorted(kv[1]), pane.timing)
            )
        )
        assert_that(
            panes,
            equal_to([([1, 2], 1), ([3], 2)]),  # ON_TIME, then LATE
        )


def test_metrics_count_each_committed_batch_once(tmp_path):
    counted = Metrics.counter("streaming_test", "elements")

    def count(element):
        counted.inc()
        return element

    stream = TestStream()
    for step in range(4):
        stream = stream.add_elements(list(range(step * 5, step * 5 + 5)))
        stream = stream.advance_watermark_to(10 * (step + 1))
    pipeline = _pipeline(tmp_path)
    _ = pipeline | stream.advance_watermark_to_infinity() | beam.Map(count)
    result = pipeline.run()
    assert result.wait_until_finish() == PipelineState.DONE
    query = result.metrics().query(MetricsFilter().with_name("elements"))
    assert [c.committed for c in query["counters"]] == [20]


def test_a_cancelled_job_stops_after_committing_its_batch(tmp_path):
    start = time.time()
    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.1
        )
        | beam.Map(lambda t: t)
    )
    result = pipeline.run()
    # An input that never ends: still running after the wait.
    assert result.wait_until_finish(duration=20_000) == PipelineState.RUNNING
    assert result.cancel() == PipelineState.CANCELLED
    checkpoint = tmp_path / "checkpoint"
    offsets = [int(p.stem) for p in (checkpoint / "offsets").glob("*.json")]
    commits = [int(p.stem) for p in (checkpoint / "commits").glob("*.json")]
    assert commits and max(commits) == max(offsets)


def test_a_checkpoint_of_the_runners_own_making_goes_when_the_job_finishes(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pipeline = beam.Pipeline(
        runner=SparkRunner(), options=PipelineOptions(["--streaming"])
    )
    sums = (
        pipeline
        | TestStream()
        .add_elements([("a", 1), ("a", 2)])
        .advance_watermark_to_infinity()
        | beam.WindowInto(FixedWindows(60))
        | beam.CombinePerKey(sum)
    )
    assert_that(sums, equal_to([("a", 3)]))
    result = pipeline.run()
    assert result.wait_until_finish() == PipelineState.DONE
    made = pathlib.Path(result.checkpoint_dir)
    assert made.parent == tmp_path and made.name.startswith("millwheel-checkpoint-")
    assert not made.exists()


def test_a_checkpoint_of_the_runners_own_making_stays_when_the_job_stops(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    caplog.set_level(logging.WARNING, logger="runners.spark")
    start = time.time()
    pipeline = beam.Pipeline(
        runner=SparkRunner(), options=PipelineOptions(["--streaming"])
    )
    _ = pipeline | PeriodicImpulse(
        start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.1
    )
    result = pipeline.run()
    assert result.wait_until_finish(duration=5_000) == PipelineState.RUNNING
    assert result.cancel() == PipelineState.CANCELLED
    # A run passing it as --checkpoint_dir resumes; the log says so at the
    # stop, where only a line at the start named it.
    assert list((pathlib.Path(result.checkpoint_dir) / "commits").glob("*.json"))
    resume = f"run it again with --checkpoint_dir={result.checkpoint_dir} to resume"
    assert any(resume in r.getMessage() for r in caplog.records), caplog.text


def test_a_checkpoint_of_another_pipeline_is_refused(tmp_path):
    def stateful(p):
        return (
            p
            | TestStream().add_elements([("a", 1)]).advance_watermark_to_infinity()
            | beam.ParDo(RemindLater())
        )

    with _pipeline(tmp_path) as p:
        stateful(p)
    other = _pipeline(tmp_path, "--streaming_key_groups=4")
    stateful(other)
    with pytest.raises(CheckpointMismatch, match="another pipeline"):
        other.run()


def _summed_per_window(p, seconds, out):
    return (
        p
        | TestStream()
        .add_elements([TimestampedValue(("a", 1), 10), TimestampedValue(("a", 2), 70)])
        .advance_watermark_to_infinity()
        | beam.WindowInto(FixedWindows(seconds))
        | beam.CombinePerKey(sum)
        | beam.Map(functools.partial(_append_line, out))
    )


def test_a_checkpoint_under_other_windows_is_refused(tmp_path):
    # The same transforms and stage names; only the window size differs,
    # and the state of the first run is kept per window of 60 s.
    with _pipeline(tmp_path) as p:
        _summed_per_window(p, 60, tmp_path / "first")
    other = _pipeline(tmp_path)
    _summed_per_window(other, 120, tmp_path / "second")
    with pytest.raises(CheckpointMismatch, match="another pipeline.*windowing"):
        other.run()


class _SumPerKey(beam.DoFn):
    """Sums a key's values in state; `size` stands for a parameter the state
    was written under, such as a window size."""

    TOTAL = ReadModifyWriteStateSpec("total", VarIntCoder())

    def process(self, element, total=beam.DoFn.StateParam(TOTAL)):
        total.write((total.read() or 0) + element[1])
        yield element[0], total.read()


def _summed_under(p, size):
    values = p | TestStream().add_elements([("a", 1)]).advance_watermark_to_infinity()
    return apply_with_state_params(
        values, "SumPerKey", beam.ParDo(_SumPerKey()), {"size": size}
    )


def test_a_checkpoint_under_other_declared_state_params_is_refused(tmp_path):
    with _pipeline(tmp_path) as p:
        _summed_under(p, 60)
    again = _pipeline(tmp_path)
    _summed_under(again, 60)
    again.run().wait_until_finish()  # the same values: resumed
    other = _pipeline(tmp_path)
    _summed_under(other, 120)
    with pytest.raises(CheckpointMismatch) as refused:
        other.run()
    # The message names the transform and both values, and how to go on.
    assert (
        "state_params of SumPerKey: recorded {'size': 60}, this run {'size': 120}"
    ) in str(refused.value)
    assert "Run with the recorded values to resume" in str(refused.value)


def _followed_into(tmp_path, inbox: str, output: str) -> beam.Pipeline:
    p = _pipeline(tmp_path)
    searches = p | FollowSearchQueries(
        str(tmp_path / inbox / "*.jsonl"), settings=FollowSettings(poll_seconds=0.2)
    )
    _ = searches[RECORDS] | WriteJsonLineParts(str(tmp_path / output / "searches"))
    return p


def test_a_checkpoint_of_other_input_or_output_paths_is_refused(tmp_path):
    # The files read are kept by path, the parts written are numbered per
    # path prefix. Before, a checkpoint restarted with another input read
    # every file again (173,711 late searches in a copy of a live Zeitgeist
    # checkpoint), and with another output numbered its parts from 0 again.
    (tmp_path / "inbox").mkdir()
    assert _followed_into(tmp_path, "inbox", "out").run().drain() == PipelineState.DONE
    for inbox, output, changed in (
        ("moved", "out", f"'file_pattern': '{tmp_path}/moved/*.jsonl'"),
        ("inbox", "new", f"'path_prefixes': ['{tmp_path}/new/searches']"),
    ):
        with pytest.raises(CheckpointMismatch) as refused:
            _followed_into(tmp_path, inbox, output).run()
        assert f"this run {{{changed}}}" in str(refused.value)
        assert "Run with the recorded values to resume" in str(refused.value)


def test_a_key_group_file_deleted_while_the_job_was_down_is_refused(tmp_path):
    # Before, the group was opened anew, empty, and the job went on without
    # its state: a live Zeitgeist lost counts of the windows it held.
    with _pipeline(tmp_path) as p:
        _summed_under(p, 60)
    gone = min((tmp_path / "checkpoint" / "state").rglob("kg-*.sqlite"))
    gone.unlink()
    again = _pipeline(tmp_path)
    _summed_under(again, 60)
    with pytest.raises(CheckpointUnusable, match=f"{gone} is missing"):
        again.run().wait_until_finish()


def test_rerunning_a_finished_job_on_its_checkpoint_says_so(tmp_path, caplog):
    with _pipeline(tmp_path) as p:
        _summed_per_window(p, 60, tmp_path / "first")
    lines = sorted((tmp_path / "first").read_text().splitlines())
    assert lines == ["('a', 1)", "('a', 2)"]
    logger = "runners.spark.streaming_job"
    with caplog.at_level(logging.WARNING, logger=logger), _pipeline(tmp_path) as p:
        _summed_per_window(p, 60, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("had already finished" in m for m in warned), warned
    assert any("new --checkpoint_dir" in m for m in warned), warned


class _Forever(beam.transforms.core.RestrictionProvider):
    """An offset range that never ends."""

    def initial_restriction(self, element):
        return OffsetRange(0, 2**62)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return 1


class SilentSource(beam.DoFn):
    """An unbounded source with nothing to say: it never outputs and never
    moves its watermark, and asks to be resumed every half second."""

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        tracker=beam.DoFn.RestrictionParam(_Forever()),
        watermark=beam.DoFn.WatermarkEstimatorParam(
            ManualWatermarkEstimator.default_provider()
        ),
    ):
        tracker.defer_remainder(Duration(seconds=0.5))
        return
        yield


def _window_sums_with_a_silent_source(tmp_path, *extra: str) -> list[str]:
    sink = tmp_path / "sums.txt"

    def record(kv):
        with open(sink, "a") as out:
            out.write(f"{kv}\n")

    start = time.time()
    pipeline = _pipeline(tmp_path, *extra)
    ticks = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.2
        )
        | "Tick" >> beam.Map(lambda t: ("ticks", 1))
    )
    silent = pipeline | beam.Impulse() | beam.ParDo(SilentSource())
    _ = (
        (ticks, silent)
        | beam.Flatten()
        | beam.WindowInto(FixedWindows(1))
        | beam.CombinePerKey(sum)
        | beam.Map(record)
    )
    result = pipeline.run()
    result.wait_until_finish(duration=15_000)
    result.cancel()
    return sink.read_text().splitlines() if sink.exists() else []


def test_an_idle_source_stops_holding_the_watermark_after_the_timeout(tmp_path):
    held = _window_sums_with_a_silent_source(tmp_path / "held")
    assert held == [], "without a timeout the silent source holds every window"
    released = _window_sums_with_a_silent_source(
        tmp_path / "released", "--streaming_idle_timeout_seconds=2"
    )
    assert released, "windows must close once the silent source is idle"
    assert all(line.startswith("('ticks', ") for line in released)


class BundleSizes(beam.DoFn):
    """Passes elements through; appends each bundle's element count to a
    file (fused into the source's stage, so its bundles are the source's)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def start_bundle(self):
        self._count = 0

    def process(self, element):
        self._count += 1
        yield element

    def finish_bundle(self):
        if self._count:
            with open(self._path, "a") as sizes:
                sizes.write(f"{self._count}\n")


def test_a_backlog_is_read_over_several_batches_at_the_record_cap(tmp_path):
    # 20,000 ticks already due when the job starts: without a cap,
    # PeriodicImpulse emits them all in its first bundle.
    now = time.time()
    sizes, seen = tmp_path / "sizes.txt", tmp_path / "seen"
    seen.mkdir()
    pipeline = _pipeline(tmp_path, "--streaming_max_records_per_batch=2000")
    _ = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=now - 20, stop_timestamp=now, fire_interval=0.001
        )
        | beam.ParDo(BundleSizes(str(sizes)))
        # One window around every tick, so that the count fires once.
        | beam.WindowInto(FixedWindows(10**10))
        | beam.combiners.Count.Globally().without_defaults()
        | beam.Map(lambda n: (seen / str(n)).touch())
    )
    assert pipeline.run().wait_until_finish(duration=240_000) == PipelineState.DONE
    bundles = [int(line) for line in sizes.read_text().split()]
    assert sum(bundles) == 20_000
    assert [p.name for p in seen.iterdir()] == ["20000"]
    assert len(bundles) >= 5
    # The cap is checked every 20 ms while the bundle runs: some overshoot.
    assert max(bundles) <= 3 * 2000


def test_elements_past_the_allowed_lateness_are_counted_as_dropped(tmp_path):
    stream = (
        TestStream()
        .add_elements([TimestampedValue(("k", 1), 1)])
        .advance_watermark_to(30)
        .add_elements([TimestampedValue(("k", 2), 2), TimestampedValue(("k", 3), 25)])
        .advance_watermark_to_infinity()
    )
    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | stream
        | beam.WindowInto(FixedWindows(10), allowed_lateness=Duration(seconds=5))
        | beam.GroupByKey()
    )
    result = pipeline.run()
    assert result.wait_until_finish() == PipelineState.DONE
    query = result.metrics().query(MetricsFilter().with_name("droppedDueToLateness"))
    assert [c.committed for c in query["counters"]] == [1]


def test_an_expired_window_emits_what_its_trigger_never_fired(tmp_path):
    # AfterCount(3) never fires for a window of two elements; once the
    # watermark passes the window's end plus its lateness they come out in a
    # last pane (and the window stops holding the watermark, so the job ends).
    stream = (
        TestStream()
        .add_elements([TimestampedValue(("k", 1), 1), TimestampedValue(("k", 2), 2)])
        .add_elements([TimestampedValue(("k", 11), 11)])
        .advance_watermark_to(16)  # [0, 10) is past end + 5 s: expired
        .add_elements([TimestampedValue(("k", 12), 12)])
        .advance_watermark_to_infinity()
    )
    with _pipeline(tmp_path, "--allow_unsafe_triggers") as p:
        panes = (
            p
            | stream
            | beam.WindowInto(
                FixedWindows(10),
                trigger=trigger.AfterCount(3),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=Duration(seconds=5),
            )
            | beam.GroupByKey()
            | beam.Map(
                lambda kv, pane=beam.DoFn.PaneInfoParam: (
                    sorted(kv[1]),
                    pane.is_last,
                    pane.timing,
                )
            )
        )
        # LATE (timing 2): the windows expire after their end.
        assert_that(panes, equal_to([([1, 2], True, 2), ([11, 12], True, 2)]))


class RecordSetups(beam.DoFn):
    """Passes elements through; appends its process id to a file at setup."""

    def __init__(self, path: str) -> None:
        self._path = path

    def setup(self):
        import os

        with open(self._path, "a") as setups:
            setups.write(f"{os.getpid()}\n")

    def process(self, element):
        yield element


def test_a_stage_keeps_its_dofns_set_up_from_batch_to_batch(tmp_path):
    # Each batch runs the stage again; Spark reuses its Python workers, and
    # a worker reuses the stage's bundle processor (and the DoFns in it).
    setups, seen = tmp_path / "setups.txt", tmp_path / "seen"
    seen.mkdir()
    stream = TestStream()
    for step in range(8):
        stream = stream.add_elements([step]).advance_watermark_to(step + 1)
    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | stream.advance_watermark_to_infinity()
        | beam.ParDo(RecordSetups(str(setups)))
        | beam.Map(lambda step: (seen / str(step)).touch())
    )
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    assert sorted(int(p.name) for p in seen.iterdir()) == list(range(8))
    workers = setups.read_text().split()
    # One setup per worker process, not one per batch.
    assert len(workers) == len(set(workers)) < 8


class _Upto(beam.transforms.core.RestrictionProvider):
    """Offsets 0..n of a bounded range, n given by the element."""

    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class SlowCounter(beam.DoFn):
    """A bounded source: one offset per batch, resumed 0.3 s later."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(_Upto())):
        position = tracker.current_restriction().start
        if tracker.try_claim(position):
            yield position
            tracker.defer_remainder(Duration(seconds=0.3))


class _UptoHalvedOnDrain(_Upto):
    """Like ``_Upto``, but a drain keeps only the first half of what is left
    (a truncation that is wrong if applied twice, as Beam's own test's)."""

    def truncate(self, element, restriction):
        return OffsetRange(restriction.start, restriction.stop // 2)


class SlowHalvingCounter(beam.DoFn):
    """``SlowCounter`` whose drain truncates to half the range."""

    def process(
        self, element, tracker=beam.DoFn.RestrictionParam(_UptoHalvedOnDrain())
    ):
        position = tracker.current_restriction().start
        if tracker.try_claim(position):
            yield position
            tracker.defer_remainder(Duration(seconds=0.2))


def test_a_drain_truncates_each_remainder_once_with_the_dofns_truncate(tmp_path):
    counted = tmp_path / "counted.txt"

    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | beam.Create([40])
        | beam.ParDo(SlowHalvingCounter())
        | beam.Map(lambda n: _append_line(counted, n))
    )
    result = pipeline.run()
    _wait_for_lines(counted, 3)
    seen = len(counted.read_text().split())
    assert 3 <= seen < 20
    # The remainder [k, 40) left at the drain becomes [k, 20) once; the
    # remainders deferred while draining are read as they are, so the count
    # goes on to 19 (truncating them again would stop it near k).
    assert result.drain() == PipelineState.DONE
    assert sorted(int(n) for n in counted.read_text().split()) == list(range(20))


def test_a_job_stopped_while_draining_goes_on_draining_when_restarted(tmp_path):
    counted = tmp_path / "counted.txt"

    def build(runner):
        options = PipelineOptions(
            ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}"]
        )
        pipeline = beam.Pipeline(runner=runner, options=options)
        _ = (
            pipeline
            | beam.Create([40])
            | beam.ParDo(SlowHalvingCounter())
            | beam.Map(lambda n: _append_line(counted, n))
        )
        return pipeline

    # Draining from the start: the range [0, 40) is truncated to [0, 20).
    result = build(SparkRunner(is_drain=True)).run()
    _wait_for_lines(counted, 3)
    assert result.cancel() == PipelineState.CANCELLED
    assert len(counted.read_text().split()) < 20
    # Restarted without asking for a drain: the commit log says it was
    # draining, so its remainders still run in the drain plan, untruncated.
    restarted = build(SparkRunner()).run()
    assert restarted.wait_until_finish(duration=60_000) == PipelineState.DONE
    assert sorted(int(n) for n in counted.read_text().split()) == list(range(20))


def test_a_drained_job_finishes_bounded_sources_and_fires_every_window(tmp_path):
    ticks_seen, windows, counted = (
        tmp_path / "ticks.txt",
        tmp_path / "windows.txt",
        tmp_path / "counted.txt",
    )

    def append(path, line):
        with open(path, "a") as out:
            out.write(f"{line}\n")

    start = time.time()
    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.2
        )
        | "Seen" >> beam.Map(lambda t: append(ticks_seen, t) or ("ticks", 1))
        | beam.WindowInto(FixedWindows(60))
        | beam.CombinePerKey(sum)
        | "Window" >> beam.Map(lambda kv: append(windows, kv[1]))
    )
    _ = (
        pipeline
        | beam.Create([15])
        | beam.ParDo(SlowCounter())
        | "Counted" >> beam.Map(lambda n: append(counted, n))
    )
    result = pipeline.run()
    assert result.wait_until_finish(duration=4_000) == PipelineState.RUNNING
    # An hour of ticks left and most of the count: a drain ends the job
    # anyway, after the count is done and the open minute has fired.
    assert result.drain() == PipelineState.DONE
    assert sorted(int(n) for n in counted.read_text().split()) == list(range(15))
    ticks = len(ticks_seen.read_text().split())
    assert ticks > 0
    assert sum(int(n) for n in windows.read_text().split()) == ticks


def test_match_continuously_reports_each_file_once_as_files_arrive(tmp_path):
    inbox, matched = tmp_path / "inbox", tmp_path / "matched.txt"
    inbox.mkdir()
    for name in ("a", "b"):
        (inbox / f"{name}.txt").write_text(name)

    start = time.time()
    pipeline = _pipeline(tmp_path)
    _ = (
        pipeline
        | MatchContinuously(
            f"{inbox}/*.txt",
            interval=0.3,
            start_timestamp=start,
            stop_timestamp=start + 8,
        )
        | beam.Map(lambda metadata: _append_line(matched, metadata.path))
    )
    result = pipeline.run()
    _wait_for_lines(matched, 2)
    # Files that arrive while the job runs are matched by a later poll.
    for name in ("c", "d"):
        (inbox / f"{name}.txt").write_text(name)
    # The polling ends at its stop timestamp, and the job with it.
    assert result.wait_until_finish(duration=90_000) == PipelineState.DONE
    paths = matched.read_text().split()
    assert sorted(paths) == [str(inbox / f"{n}.txt") for n in "abcd"]


def test_a_triggered_side_input_serves_a_window_from_its_first_pane(tmp_path):
    # The slowly-changing side input: a PeriodicImpulse in the global window,
    # fired by a processing-time trigger, read by a main input in windows
    # far longer than the test. Its watermark passes no main window's end
    # while the test runs; its first pane must be enough.
    seen = tmp_path / "seen.txt"

    def record(tick, configs):
        _append_line(seen, len(list(configs)))

    start = time.time()
    pipeline = _pipeline(tmp_path)
    configs = (
        pipeline
        | "Configs"
        >> PeriodicImpulse(
            start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.5
        )
        | "Global"
        >> beam.WindowInto(
            GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterProcessingTime(1)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | "Config" >> beam.Map(lambda tick: "config")
    )
    _ = (
        pipeline
        | "Ticks"
        >> PeriodicImpulse(
            start_timestamp=start, stop_timestamp=start + 3600, fire_interval=0.5
        )
        | "Days" >> beam.WindowInto(FixedWindows(10**6))
        | "Read" >> beam.Map(record, configs=beam.pvalue.AsIter(configs))
    )
    result = pipeline.run()
    _wait_for_lines(seen, 3)
    result.cancel()
    assert seen.exists(), "no main element read the side input within 60 s"
    counts = [int(n) for n in seen.read_text().split()]
    assert len(counts) >= 3
    assert min(counts) >= 1


def _seen_with_latest_side(events, mode):
    """Each main element of ``events`` with what two views of the side
    elements show: the latest one (``Latest`` of each firing, a singleton)
    and the firing's elements (a list), the global window fired by a
    processing-time trigger of its own in accumulation ``mode``."""
    side = events["side"] | "Fired" >> beam.WindowInto(
        GlobalWindows(),
        trigger=trigger.Repeatedly(trigger.AfterProcessingTime(1)),
        accumulation_mode=mode,
    )
    latest = side | beam.combiners.Latest.Globally().without_defaults()
    pane = (
        side
        | beam.WithKeys(0)
        | beam.GroupByKey()
        | "Values" >> beam.FlatMap(lambda kv: kv[1])
    )
    return events["main"] | "Seen" >> beam.Map(
        lambda x, latest, pane: (x, latest, sorted(pane)),
        latest=beam.pvalue.AsSingleton(latest),
        pane=beam.pvalue.AsList(pane),
    )


@pytest.mark.parametrize(
    "mode, listed",
    [
        (trigger.AccumulationMode.DISCARDING, ["v2", "v3"]),
        (trigger.AccumulationMode.ACCUMULATING, ["v1", "v2", "v3"]),
    ],
)
def test_a_side_input_fired_again_and_again_shows_its_latest_pane(
    tmp_path, mode, listed
):
    # Beam's slowly-updating side input: the global window, fired by a
    # processing-time trigger of its own. Beam serves the latest firing of
    # a window; every firing's elements were kept before, so AsSingleton
    # failed at the second pane and AsList grew with each.
    stream = (
        TestStream()
        .add_elements([TimestampedValue("v1", 1)], tag="side")
        .advance_processing_time(2)  # pane 0: v1
        .add_elements(["a"], tag="main")
        .add_elements(
            [TimestampedValue("v2", 2), TimestampedValue("v3", 3)], tag="side"
        )
        .advance_processing_time(2)  # pane 1: v2 and v3 (and v1 if accumulating)
        .add_elements(["b"], tag="main")
        .advance_watermark_to_infinity(tag="main")
        .advance_watermark_to_infinity(tag="side")
    )
    with _pipeline(tmp_path) as p:
        seen = _seen_with_latest_side(p | stream, mode)
        assert_that(seen, equal_to([("a", "v1", ["v1"]), ("b", "v3", listed)]))


def test_a_restarted_job_reads_the_latest_pane_it_had_and_keeps_no_older(
    tmp_path,
):
    seen = tmp_path / "seen.txt"

    def script():
        return (
            TestStream()
            .add_elements([TimestampedValue("v1", 1)], tag="side")
            .advance_processing_time(2)  # pane 0: v1
            .add_elements(["x"], tag="main")  # the job is stopped after this
            .add_elements(["a"], tag="main")  # read from the restored pane
            .add_elements(
                [TimestampedValue("v2", 2), TimestampedValue("v3", 3)], tag="side"
            )
            .advance_processing_time(2)  # pane 1 replaces the restored one
            .add_elements(["b"], tag="main")
            .advance_watermark_to_infinity(tag="main")
            .advance_watermark_to_infinity(tag="side")
        )

    def record(line):
        _append_line(seen, json.dumps(line))
        if line[0] == "x":
            time.sleep(2)  # the cancel comes while its batch runs

    def run():
        pipeline = _pipeline(tmp_path)
        events = pipeline | script()
        discarding = trigger.AccumulationMode.DISCARDING
        _ = _seen_with_latest_side(events, discarding) | beam.Map(record)
        return pipeline.run()

    first = run()
    _wait_for_lines(seen, 1)
    assert first.cancel() == PipelineState.CANCELLED
    assert len(seen.read_text().splitlines()) == 1
    assert run().wait_until_finish(duration=60_000) == PipelineState.DONE
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        ["x", "v1", ["v1"]],
        ["a", "v1", ["v1"]],
        ["b", "v3", ["v2", "v3"]],
    ]
    checkpoint = tmp_path / "checkpoint"
    # Only the newest firings are kept; no element went unfired.
    assert len(list((checkpoint / "side_firings").glob("*.pickle"))) == 1
    assert not list((checkpoint / "side_inputs").glob("*.pickle"))


def _seen_with_windowed_sides(events):
    """Each main element of ``events`` with what it reads of two side
    inputs in 10 s fixed windows: the side elements as they come (no
    trigger fires them: the checkpoint stores them per batch) and grouped
    (a GroupByKey fires them: stored as firings). The main input, in the
    same windows, allows 10 s of lateness."""
    side = events["side"] | "SideWindows" >> beam.WindowInto(FixedWindows(10))
    grouped = (
        side
        | beam.WithKeys(0)
        | beam.GroupByKey()
        | "Values" >> beam.FlatMap(lambda kv: kv[1])
    )
    # Windowed before the stage that reads the side inputs, which waits for
    # them by the windows of its input.
    main = (
        events["main"]
        | "MainWindows" >> beam.WindowInto(FixedWindows(10), allowed_lateness=10)
        | beam.Reshuffle()
    )
    return main | "Seen" >> beam.Map(
        lambda x, raw, fired: (x, sorted(raw), sorted(fired)),
        raw=beam.pvalue.AsList(side),
        fired=beam.pvalue.AsList(grouped),
    )


def _stored_side_bytes(checkpoint: pathlib.Path) -> bytes:
    """Everything the checkpoint stores of the side inputs, as one string
    to look for elements in."""
    files = sorted(checkpoint.glob("side_inputs/*.pickle")) + sorted(
        checkpoint.glob("side_firings/*.pickle")
    )
    return b"".join(path.read_bytes() for path in files)


def test_a_side_window_goes_once_no_main_element_can_read_it(tmp_path):
    # A side input in fixed windows over a stream grew for ever: on the
    # driver, in the checkpoint and in every task's preload. Its window
    # [0, 10) can be read by main elements of [0, 10) only, which are late
    # past their allowed lateness once the watermark passes 10 + 10 s.
    seen = tmp_path / "seen.txt"

    def script():
        return (
            TestStream()
            .add_elements([TimestampedValue("early-side", 1)], tag="side")
            .add_elements([TimestampedValue("later-side", 11)], tag="side")
            .advance_watermark_to(30, tag="side")
            .add_elements([TimestampedValue("a", 5)], tag="main")
            .advance_watermark_to(25, tag="main")  # [0, 10) expires
            # Late, within the allowed lateness: [10, 20) lasts until 30.
            .add_elements([TimestampedValue("late", 12)], tag="main")
            .add_elements([TimestampedValue("x", 15)], tag="main")  # stopped
            .add_elements([TimestampedValue("b", 18)], tag="main")  # restored
            .advance_watermark_to_infinity(tag="main")
            .advance_watermark_to_infinity(tag="side")
        )

    def record(line):
        _append_line(seen, json.dumps(line, separators=(",", ":")))  # a word
        if line[0] == "x":
            time.sleep(2)  # the cancel comes while its batch runs

    def run():
        pipeline = _pipeline(tmp_path)
        _ = _seen_with_windowed_sides(pipeline | script()) | beam.Map(record)
        return pipeline.run()

    first = run()
    _wait_for_lines(seen, 3)
    assert first.cancel() == PipelineState.CANCELLED
    checkpoint = tmp_path / "checkpoint"
    stored = _stored_side_bytes(checkpoint)
    assert b"early-side" not in stored
    assert b"later-side" in stored
    assert run().wait_until_finish(duration=60_000) == PipelineState.DONE
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        ["a", ["early-side"], ["early-side"]],
        ["late", ["later-side"], ["later-side"]],
        ["x", ["later-side"], ["later-side"]],
        ["b", ["later-side"], ["later-side"]],
    ]
    # The watermark went to +inf: every window expired, and nothing is kept.
    assert b"side" not in _stored_side_bytes(checkpoint)

"""Fast unit tests of the runner's pieces that need no SparkContext."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import types
import zipfile

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms.userstate import Timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming
from py4j.protocol import Py4JError

from runners.spark import errors
from runners.spark.drain_plan import truncation_targets
from runners.spark.driver_stages import driver_stages
from runners.spark.errors import (
    StageFailure,
    driver_lost,
    from_spark_exception,
    summarize,
)
from runners.spark.options import SparkOptions, check_options, parse_spark_conf
from runners.spark.plan import TimerFamily
from runners.spark.runner import optimize
from runners.spark.state_store import TimerQueue
from runners.spark.translation import RESHUFFLE
from runners.spark.watermark import MAX_MICROS, BatchTime, MicroBatchTime
from runners.spark.worker_daemon import (
    java_archives_without_python,
    quiet_when_the_jvm_hangs_up,
)

EVENT = beam_runner_api_pb2.TimeDomain.EVENT_TIME
PROCESSING = beam_runner_api_pb2.TimeDomain.PROCESSING_TIME
PANE = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, 0)


def _timer(key: str, ts: int, tag: str = "", clear: bool = False) -> Timer:
    return Timer(key, tag, (GlobalWindow(),), clear, Timestamp(ts), Timestamp(ts), PANE)


def _queue() -> TimerQueue:
    return TimerQueue(
        [
            TimerFamily("ParDo", "a", EVENT),
            TimerFamily("ParDo", "p", PROCESSING),
        ]
    )


def _set(queue: TimerQueue, family: str, *timers: Timer) -> None:
    for timer in timers:
        queue.record("ParDo", family, timer)


def _pop(queue: TimerQueue, event=MAX_MICROS, processing=MAX_MICROS) -> tuple | None:
    due = queue.pop_due(event, processing)
    if due is None:
        return None
    _, family, t = due
    return (
        family,
        t.user_key,
        int(t.fire_timestamp.micros // 10**6),
        t.dynamic_timer_tag,
    )


def _drain(queue: TimerQueue) -> list[tuple]:
    return list(iter(lambda: _pop(queue), None))


def test_last_set_wins_and_clear_removes():
    queue = _queue()
    _set(queue, "a", _timer("k", 10), _timer("k", 20), _timer("j", 5, "t"))
    _set(queue, "a", _timer("j", 0, "t", clear=True))
    assert len(queue) == 1
    assert _drain(queue) == [("a", "k", 20, "")]
    assert not queue.has_due(MAX_MICROS, MAX_MICROS)


def test_timers_fire_in_time_order_processing_time_last():
    queue = _queue()
    _set(queue, "a", _timer("k", 30, "x"), _timer("k", 10, "y"), _timer("j", 20))
    _set(queue, "p", _timer("k", 1))
    assert _drain(queue) == [
        ("a", "k", 10, "y"),
        ("a", "j", 20, ""),
        ("a", "k", 30, "x"),
        # Processing-time timers come once no event-time timer is due.
        ("p", "k", 1, ""),
    ]


def test_ties_fire_in_the_order_they_were_set():
    queue = _queue()
    _set(queue, "a", _timer("b", 10), _timer("a", 10), _timer("c", 10))
    assert [key for _, key, _, _ in _drain(queue)] == ["b", "a", "c"]


def test_a_reset_timer_fires_once_at_its_new_time():
    queue = _queue()
    _set(queue, "a", _timer("k", 10), _timer("k", 40, "late"))
    _set(queue, "a", _timer("k", 50))  # moves the untagged timer past 40
    assert _drain(queue) == [("a", "k", 40, "late"), ("a", "k", 50, "")]


def test_what_a_callback_changes_applies_before_the_next_timer():
    queue = _queue()
    _set(queue, "a", _timer("k", 10), _timer("k", 90, "end"), _timer("k", 95, "gc"))
    assert _pop(queue) == ("a", "k", 10, "")
    # As the callback of the timer at 10 would: the next window's timer,
    # and the gc timer cleared.
    _set(queue, "a", _timer("k", 20), _timer("k", 0, "gc", clear=True))
    assert _drain(queue) == [("a", "k", 20, ""), ("a", "k", 90, "end")]


def test_batch_time_makes_every_timer_due_once_the_input_is_consumed():
    queue = _queue()
    _set(queue, "a", _timer("k", 10))
    _set(queue, "p", _timer("k", 5))
    time = BatchTime()
    assert not queue.has_due(time.event_horizon(), time.processing_horizon())
    assert queue.pop_due(time.event_horizon(), time.processing_horizon()) is None
    assert _pop(queue, Timestamp(9).micros, time.processing_horizon()) is None
    time.input_exhausted()
    assert queue.has_due(time.event_horizon(), time.processing_horizon())
    assert _drain(queue) == [("a", "k", 10, ""), ("p", "k", 5, "")]


def test_micro_batch_time_fires_event_timers_strictly_before_the_watermark():
    queue = _queue()
    _set(queue, "a", _timer("k", 10), _timer("j", 11))
    _set(queue, "p", _timer("k", 100), _timer("j", 101))
    time = MicroBatchTime(Timestamp(11).micros, Timestamp(100).micros)
    time.input_exhausted()  # the horizons do not move within a batch
    due = list(
        iter(lambda: _pop(queue, time.event_horizon(), time.processing_horizon()), None)
    )
    # The timer at 11 waits for a watermark past 11; the processing-time
    # timer at 100 is due at processing time 100.
    assert due == [("a", "k", 10, ""), ("p", "k", 100, "")]


SDK_ERROR = """Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in process
  File "/home/u/job.py", line 3, in parse
    raise ValueError("bad")
ValueError: bad

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/apache_beam/runners/worker/sdk_worker.py", line 1, in _execute
    response = task()
  File "/home/u/job.py", line 3, in parse
    raise ValueError("bad")
ValueError: bad [while running 'Parse']
"""


def test_summarize_keeps_exception_transform_and_user_frames():
    record = summarize("stage 3", SDK_ERROR)
    assert record["type"] == "ValueError"
    assert record["message"] == "bad [while running 'Parse']"
    assert record["transform"] == "Parse"
    assert record["user_frames"] == [
        'File "/home/u/job.py", line 3, in parse',
        '  raise ValueError("bad")',
    ]


def test_error_travels_through_a_spark_exception_text():
    relayed = RuntimeError(
        f"py4j JVM noise\n{StageFailure('stage 3', SDK_ERROR)}\nat ..."
    )
    error = from_spark_exception(relayed)
    assert isinstance(error, ValueError)
    assert str(error).startswith("ValueError: bad [while running 'Parse']")
    assert error.transform == "Parse"
    assert from_spark_exception(RuntimeError("no record")) is None


def test_spark_conf_pairs():
    assert parse_spark_conf(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError):
        parse_spark_conf(["=1"])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--spark_master=x"], "--spark_master (did you mean --spark_master_url?)"),
        (["--checkpointdir=c"], "--checkpointdir (did you mean --checkpoint_dir?)"),
        (["--spark_bundle_bytes=-5"], "--spark_bundle_bytes must be >= 1, got -5"),
        (["--streaming_key_groups=0"], "--streaming_key_groups must be >= 1"),
        (["--spark_progress_seconds=nan"], "--spark_progress_seconds must be >= 0"),
        # Each of these failed only once the JVM started.
        (
            ["--spark_master_url=127.0.0.1:7077"],
            "(did you mean spark://127.0.0.1:7077?)",
        ),
        (["--spark_master_url=local[two]"], "'local[two]' is not a Spark master"),
        (["--spark_master_url=local[0]"], "give local, local[N], local[*]"),
        (["--spark_master_url=mesos://m:5050"], "is not a Spark master"),
        (["--spark_conf", "spark.executor.memory"], "expects key=value"),
        (["--checkpoint_dir=/dev/null"], "'/dev/null' is a file, not a directory"),
        (["--checkpoint_dir=/dev/null/ck"], "'/dev/null/ck': '/dev/null' is a file"),
    ],
)
def test_mistaken_runner_options_are_refused(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_options(PipelineOptions(flags))


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[2]",
        "local[*]",
        "local[2,3]",
        "local[*, 4]",
        "local-cluster[2,1,1024]",
        "spark://h:7077",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://https://k:6443",
    ],
)
def test_every_form_of_spark_master_passes(master):
    check_options(PipelineOptions([f"--spark_master_url={master}"]))


def test_runner_options_in_range_and_other_flags_pass():
    # A flag of the user's own (no runner prefix) is not the runner's business.
    options = PipelineOptions(
        ["--spark_master_url=local[2]", "--checkpoint_dir=/tmp/c", "--my_flag=1"]
    )
    check_options(options)
    # Through the job server, values arrive as the strings they were.
    options.view_as(SparkOptions).spark_bundle_bytes = "8388608"
    check_options(options)
    options.view_as(SparkOptions).spark_bundle_bytes = "lots"
    with pytest.raises(ValueError, match="spark_bundle_bytes must be >= 1, got lots"):
        check_options(options)


class _Remember(beam.DoFn):
    seen = beam.transforms.userstate.ReadModifyWriteStateSpec(
        "seen", beam.coders.VarIntCoder()
    )

    def process(self, element, seen=beam.DoFn.StateParam(seen)):
        seen.write(1)
        yield element


def test_driver_runs_only_stages_whose_inputs_and_outputs_stay_on_it(tmp_path):
    p = beam.Pipeline()
    nums = p | "Nums" >> beam.Create([1, 2, 3])
    total = nums | "Total" >> beam.CombineGlobally(sum)
    _ = (
        nums
        | "Label" >> beam.Map(lambda x, t: f"{x}/{t}", t=beam.pvalue.AsSingleton(total))
        | "Sink" >> beam.io.WriteToText(str(tmp_path / "out"))
    )
    # One seed, but its expansion goes on to a shuffle: not the driver's.
    _ = (
        p
        | "Seed" >> beam.Create(["s"])
        | "Expand" >> beam.FlatMap(lambda s: [(s, i) for i in range(1000)])
        | "Group" >> beam.GroupByKey()
    )
    # Read only as a side input, but stateful: keyed state belongs on Spark.
    _ = (
        p
        | "Keyed" >> beam.Create([("k", 1)])
        | "Remember" >> beam.ParDo(_Remember())
        | "Ignore" >> beam.Map(lambda kv, side: kv, side=beam.pvalue.AsList(nums))
    )
    optimized = optimize(p.to_runner_api())
    primitives = [
        optimized.components.transforms[t] for t in optimized.root_transform_ids
    ]

    def stages_of(*names: str) -> set[str]:
        return {
            proto.unique_name
            for proto in primitives
            if any(name in proto.unique_name for name in names)
        }

    on_driver = driver_stages(primitives)
    assert on_driver == stages_of(
        "Total/DoOnce/FlatMap", "InitializeWrite", "PreFinalize", "FinalizeWrite"
    )
    assert len(on_driver) == 4
    assert len(stages_of("Expand", "Remember", "Label")) == 3


def test_the_daemon_drops_only_jars_without_python(tmp_path):
    classes, python, broken = (tmp_path / n for n in ("a.jar", "b.jar", "c.jar"))
    with zipfile.ZipFile(classes, "w") as jar:
        jar.writestr("org/apache/Spark.class", b"\xca\xfe")
    with zipfile.ZipFile(python, "w") as jar:
        jar.writestr("org/apache/Spark.class", b"\xca\xfe")
        jar.writestr("helpers/util.py", "X = 1\n")
    broken.write_bytes(b"not a zip")
    path = [str(tmp_path), str(classes), str(python), str(broken), "/no/such.jar"]
    assert java_archives_without_python(path) == [str(classes)]


def _flush_to(sock: socket.socket) -> int:
    """A worker's last steps: answer on its socket, flush; return 0."""
    out = sock.makefile("wb")
    out.write(b"x" * 1_000_000)
    out.flush()
    return 0


def test_a_worker_whose_socket_the_jvm_closed_ends_without_a_traceback():
    ours, jvm = socket.socketpair()
    jvm.close()
    with ours:
        with pytest.raises(BrokenPipeError):
            _flush_to(ours)
        # PySpark's daemon ends a worker that returns a non-zero code.
        assert quiet_when_the_jvm_hangs_up(_flush_to)(ours) != 0


def _context_of(process):
    """Where `driver_lost` finds the JVM's process on a SparkContext. A real
    process stands in for the JVM: killing a session's JVM would end every
    other test of this worker (the whole path, a live job whose JVM is
    killed, is in tests/pipelines/test_zeitgeist_live.py)."""
    return types.SimpleNamespace(_gateway=types.SimpleNamespace(proc=process))


def _refused() -> ConnectionRefusedError:
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            raise ConnectionRefusedError(111, "Connection refused") from None
    except ConnectionRefusedError as error:
        return error


def test_a_killed_driver_jvm_is_named_with_its_signal_and_the_outcome():
    process = subprocess.Popen(["sleep", "60"])
    process.kill()
    lost = driver_lost(_context_of(process), _refused(), "the outputs are partial")
    assert str(lost) == (
        "Spark's driver JVM was killed by SIGKILL; the outputs are partial"
    )


def test_a_driver_jvm_that_exited_is_lost_whatever_the_error():
    process = subprocess.Popen(["sh", "-c", "exit 3"])
    process.wait()
    lost = driver_lost(_context_of(process), KeyError("x"), "resume")
    assert str(lost) == "Spark's driver JVM exited with status 3; resume"


def test_a_py4j_error_waits_for_a_jvm_on_its_way_out():
    # A killed JVM closes its sockets before it can be reaped, so the
    # driver's next call can fail, here as Py4J words it when a reflection
    # call gets no answer, while the process still runs.
    process = subprocess.Popen(["sleep", "0.5"])
    error = Py4JError("PythonRDD does not exist in the JVM")
    lost = driver_lost(_context_of(process), error, "resume")
    assert str(lost) == "Spark's driver JVM exited with status 0; resume"


def test_a_broken_connection_to_a_running_jvm_is_not_a_lost_driver(monkeypatch):
    monkeypatch.setattr(errors, "_EXIT_GRACE_SECONDS", 0.2)
    process = subprocess.Popen(["sleep", "60"])
    try:
        context = _context_of(process)
        assert driver_lost(context, _refused(), "resume") is None
        assert driver_lost(context, ValueError("user code"), "resume") is None
    finally:
        process.kill()
        process.wait()


def test_a_gateway_it_did_not_launch_is_judged_by_the_error():
    context = types.SimpleNamespace(_gateway=types.SimpleNamespace())
    wrapped = RuntimeError("collect failed")
    wrapped.__context__ = _refused()
    assert str(driver_lost(context, wrapped, "resume")) == (
        "Spark's driver JVM stopped answering; resume"
    )
    assert driver_lost(context, ValueError("user code"), "resume") is None


def test_a_worker_keeps_its_return_code_and_its_other_errors():
    assert quiet_when_the_jvm_hangs_up(lambda code: code)(0) == 0
    with pytest.raises(ZeroDivisionError):
        quiet_when_the_jvm_hangs_up(lambda: 1 // 0)()


class _Halves(beam.DoFn):
    """A splittable DoFn over [0, element) whose drain keeps the first half."""

    class Provider(beam.transforms.core.RestrictionProvider):
        def initial_restriction(self, element):
            return OffsetRange(0, element)

        def create_tracker(self, restriction):
            return OffsetRestrictionTracker(restriction)

        def restriction_size(self, element, restriction):
            return restriction.size()

        def truncate(self, element, restriction):
            return OffsetRange(restriction.start, restriction.stop // 2)

    def process(self, element, tracker=beam.DoFn.RestrictionParam(Provider())):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield position
            position += 1


def _splittable_pipeline() -> beam_runner_api_pb2.Pipeline:
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([8]) | beam.ParDo(_Halves()) | beam.Map(str)
    return pipeline.to_runner_api()


def _stage_names(pipeline: beam_runner_api_pb2.Pipeline) -> list[str]:
    transforms = pipeline.components.transforms
    return [transforms[t].unique_name for t in pipeline.root_transform_ids]


def test_a_pipeline_optimised_again_in_the_same_process_keeps_its_stage_names():
    # A streaming job finds its state and remainders by stage name, and a
    # restart may come after other pipelines ran in the same process.
    first = _stage_names(optimize(_splittable_pipeline(), streaming=True))
    _ = optimize(_splittable_pipeline(), streaming=True, is_drain=True)
    assert _stage_names(optimize(_splittable_pipeline(), streaming=True)) == first


_PRINT_ZEITGEIST_STAGE_NAMES = """
import apache_beam as beam
from pipelines import config
from pipelines.outputs import write_parts
from pipelines.zeitgeist import build, zeitgeist_transform
from pipelines.zeitgeist_flags import DEFAULT_CONFIG
from runners.spark.runner import optimize
from transforms.records.follow import FollowSearchQueries

pipeline = beam.Pipeline()
transform = zeitgeist_transform(config.read(DEFAULT_CONFIG))
build(pipeline, ["in/*.jsonl"], None, transform, __import__("pathlib").Path("out"),
      ["window_counts", "scores"], read=FollowSearchQueries, write=write_parts(0.0))
plan = optimize(pipeline.to_runner_api(), streaming=True)
transforms = plan.components.transforms
print(sorted(transforms[t].unique_name for t in plan.root_transform_ids))
"""


def test_stage_names_are_the_same_in_every_process():
    # A restart is another process, with another seed for string hashing:
    # the Zeitgeist pipeline's fused stages must keep their names, or the
    # restart refuses the checkpoint (or worse, finds no state).
    names = {
        subprocess.run(
            [sys.executable, "-c", _PRINT_ZEITGEIST_STAGE_NAMES],
            env=dict(os.environ, PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(names) == 1, names


def test_the_drain_plan_truncates_in_a_stage_of_its_own_before_process():
    plan = optimize(_splittable_pipeline(), streaming=True)
    drain_plan = optimize(_splittable_pipeline(), streaming=True, is_drain=True)
    primitives = [
        drain_plan.components.transforms[t] for t in drain_plan.root_transform_ids
    ]
    targets = truncation_targets(
        [plan.components.transforms[t] for t in plan.root_transform_ids], primitives
    )
    ((processing, truncating),) = targets.items()
    assert "Process" in processing and "TruncateAndSizeRestriction" in truncating
    # The truncation's output reaches Process only through a Reshuffle, so
    # the Process stage resumes its own remainders without truncating them.
    (truncation,) = (p for p in primitives if p.unique_name == truncating)
    (truncated,) = truncation.outputs.values()
    (reshuffle,) = (p for p in primitives if truncated in p.inputs.values())
    assert reshuffle.spec.urn == RESHUFFLE
    (reshuffled,) = reshuffle.outputs.values()
    (process,) = (p for p in primitives if reshuffled in p.inputs.values())
    assert "Process" in process.unique_name

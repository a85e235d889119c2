"""SparkRunner on local[2]: equivalence with DirectRunner, primitives, I/O,
metrics, options and error surfacing."""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import pipelines_for_tests as tp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

from runners.in_process import InProcessDirectRunner
from runners.spark import SparkRunner
from runners.spark.errors import PipelineError
from runners.spark.options import SparkOptions, master_url
from runners.spark.progress import BatchProgress
from runners.spark.session import ensure_python_env

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]


def _run_to_lines(runner, build, out_dir) -> list[str]:
    prefix = os.path.join(out_dir, "out")
    with beam.Pipeline(runner=runner) as p:
        build(p) | beam.io.WriteToText(prefix)
    lines = []
    for path in glob.glob(prefix + "*"):
        with open(path) as f:
            lines.extend(f.read().splitlines())
    return sorted(lines)


def test_stateful_timers_match_direct_runner(tmp_path):
    direct = _run_to_lines(
        InProcessDirectRunner(), tp.stateful_pipeline, tmp_path / "d"
    )
    spark = _run_to_lines(SparkRunner(), tp.stateful_pipeline, tmp_path / "s")
    assert spark == direct
    assert any("beat" in line for line in spark)
    assert not any("cancelled" in line for line in spark)


def test_processing_time_timers_fire_at_end_of_input():
    with beam.Pipeline(runner=SparkRunner()) as p:
        out = (
            p
            | beam.Create([("a", 1), ("b", 2), ("a", 3)])
            | beam.ParDo(tp.ProcessingTimeFn())
        )
        assert_that(out, equal_to(["a flushed [1, 3]", "b flushed [2]"]))


def test_a_timer_callback_changes_timers_before_the_next_fires():
    # Every timer is due at once when the input ends; the runner still fires
    # them one callback at a time, so `first` clearing `gc` and setting
    # `second` for an earlier time both take effect. (Beam's FnApiRunner
    # fires a round of due timers family by family and logs
    # gc@40,first@10,end@50 here.)
    with beam.Pipeline(runner=SparkRunner()) as p:
        out = p | beam.Create([("a", 0), ("b", 0)]) | beam.ParDo(tp.TimerChangesFn())
        assert_that(
            out,
            equal_to([f"{k}: first@10,second@20,end@50" for k in ("a", "b")]),
        )


def test_side_inputs_all_views():
    with beam.Pipeline(runner=SparkRunner()) as p:
        main = p | "Main" >> beam.Create([1, 2])
        single = p | "Single" >> beam.Create([10])
        kvs = p | "KVs" >> beam.Create([("a", 1), ("b", 2), ("a", 3)])
        out = main | beam.Map(
            lambda x, s, it, lst, d, mm: (
                x + s,
                sum(it),
                len(lst),
                sorted(d.items()),
                sorted(mm["a"]),
            ),
            s=beam.pvalue.AsSingleton(single),
            it=beam.pvalue.AsIter(single),
            lst=beam.pvalue.AsList(kvs),
            d=beam.pvalue.AsDict(p | "Dict" >> beam.Create([("x", 1), ("y", 2)])),
            mm=beam.pvalue.AsMultiMap(kvs),
        )
        expected_tail = (10, 3, [("x", 1), ("y", 2)], [1, 3])
        assert_that(out, equal_to([(11, *expected_tail), (12, *expected_tail)]))


def _offset_by(side: int, out_dir: Path) -> list[int]:
    """Runs a job whose stage with a side input is the same, byte for byte,
    whatever `side` is (a reshuffle keeps the sink, which names `out_dir`,
    out of it); returns what the job wrote."""
    p = beam.Pipeline(runner=SparkRunner())
    offset = beam.pvalue.AsSingleton(p | "Side" >> beam.Create([side]))
    main = p | "Main" >> beam.Create(list(range(20)), reshuffle=True)
    added = main | "Add" >> beam.Map(lambda x, s: x + s, s=offset)
    added | beam.Reshuffle() | beam.io.WriteToText(str(out_dir / "out"))
    p.run().wait_until_finish()
    lines = []
    for name in glob.glob(str(out_dir / "out*")):
        lines.extend(Path(name).read_text().split())
    return sorted(int(line) for line in lines)


def test_a_second_job_sees_its_own_side_input_not_the_firsts(tmp_path):
    # Spark reuses its Python workers, and a worker keeps the harnesses of
    # the stages it ran; the SDK reads a global side input once per
    # harness. The second job must not be served the first job's value.
    for i, side in enumerate((10, 1000, 10)):
        written = _offset_by(side, tmp_path / str(i))
        assert written == [x + side for x in range(20)]


def test_independent_side_inputs_are_collected_in_one_job(spark_session):
    tracker = spark_session.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    with beam.Pipeline(runner=SparkRunner()) as p:
        low = p | "Low" >> beam.Create([1, 2]) | "Double" >> beam.Map(lambda x: 2 * x)
        high = p | "High" >> beam.Create([8, 9])
        out = (
            p
            | "Main" >> beam.Create([3, 10])
            | beam.Map(
                lambda x, lo, hi: (x, min(lo) <= x <= max(hi)),
                lo=beam.pvalue.AsList(low),
                hi=beam.pvalue.AsList(high),
            )
        )
        assert_that(out, equal_to([(3, True), (10, False)]))
    # One job collects both side inputs; the other runs the stages. (One job
    # per side input would make three.)
    assert len(set(tracker.getJobIdsForGroup()) - before) == 2


def _count_seed(seed, counter=beam.metrics.Metrics.counter("t", "seeds")):
    counter.inc()
    return 10


def test_small_impulse_rooted_stages_run_on_the_driver(spark_session, tmp_path):
    tracker = spark_session.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    prefix = str(tmp_path / "out")
    p = beam.Pipeline(runner=SparkRunner())
    nums = p | "Nums" >> beam.Create([1, 2, 3])
    total = nums | beam.CombineGlobally(sum)
    scale = p | "Seed" >> beam.Create([None]) | "Scale" >> beam.Map(_count_seed)
    _ = (
        nums
        | beam.Map(
            lambda x, t, s: f"{x}/{t * s}",
            t=beam.pvalue.AsSingleton(total),
            s=beam.pvalue.AsSingleton(scale),
        )
        | beam.io.WriteToText(prefix)
    )
    result = p.run()
    lines = sorted(
        line
        for path in glob.glob(prefix + "*")
        for line in Path(path).read_text().split()
    )
    assert lines == ["1/60", "2/60", "3/60"]
    # Spark runs one job to collect the combined sum and one to write the
    # files and collect their names. Before, the sum's default value, the
    # sink's initialisation, pre-finalisation and finalisation each took a
    # job of their own too: five in all.
    assert len(set(tracker.getJobIdsForGroup()) - before) == 2
    seeds = result.metrics().query(beam.metrics.MetricsFilter().with_name("seeds"))
    assert [c.committed for c in seeds["counters"]] == [1]


def test_user_error_in_a_driver_stage_surfaces_python_exception():
    with pytest.raises(ValueError) as info, beam.Pipeline(runner=SparkRunner()) as p:
        p | beam.Create([3]) | "Explode" >> beam.Map(_explode)
    assert isinstance(info.value, PipelineError)
    assert str(info.value).startswith("ValueError: bad element 3")
    assert info.value.transform == "Explode"


def _worker_imports(_):
    import pyspark.ml.param  # a pyspark package the worker daemon did not import

    return [entry for entry in sys.path if entry.endswith(".jar")], bool(
        pyspark.ml.param.Params
    )


def test_workers_import_path_has_no_java_archives(spark_session):
    if not spark_session.sparkContext.master.startswith("local"):
        pytest.skip("the worker daemon serves local masters only")
    results = spark_session.sparkContext.parallelize([0, 1], 2).map(_worker_imports)
    assert results.collect() == [([], True), ([], True)]


@pytest.mark.parametrize("runner", [InProcessDirectRunner, SparkRunner])
def test_a_global_grouping_is_stamped_at_the_end_of_the_global_window(runner):
    # Beam's default timestamp combiner puts a grouping's output at the end
    # of its window. In the default global window SparkRunner stamped it at
    # the start of time instead, so that windowing it again put every
    # aggregate in the first window of time.
    # In milliseconds, as Beam's coders carry timestamps between stages.
    end = window.GlobalWindow().max_timestamp().micros // 1000

    def stamped(element, timestamp=beam.DoFn.TimestampParam):
        yield element, timestamp.micros // 1000

    with beam.Pipeline(runner=runner()) as p:
        pairs = p | beam.Create([("a", 1), ("a", 2), ("b", 3)])
        grouped = pairs | beam.GroupByKey() | beam.MapTuple(lambda k, v: (k, sorted(v)))
        summed = pairs | beam.CombinePerKey(sum)
        assert_that(
            grouped | "GroupedAt" >> beam.ParDo(stamped),
            equal_to([(("a", [1, 2]), end), (("b", [3]), end)]),
            label="grouped",
        )
        assert_that(
            summed | "SummedAt" >> beam.ParDo(stamped),
            equal_to([(("a", 3), end), (("b", 3), end)]),
            label="summed",
        )


def test_sessions():
    with beam.Pipeline(runner=SparkRunner()) as p:
        sessions = (
            p
            | "S" >> beam.Create([("k", 1), ("k", 2), ("k", 30)])
            | "ST" >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
            | "SW" >> beam.WindowInto(window.Sessions(5))
            | "SG" >> beam.GroupByKey()
            | "SV" >> beam.MapTuple(lambda k, v: sorted(v))
        )
        assert_that(sessions, equal_to([[1, 2], [30]]), label="sessions")


@pytest.mark.parametrize(
    "mode, panes",
    [
        (trigger.AccumulationMode.ACCUMULATING, [2, 4]),
        (trigger.AccumulationMode.DISCARDING, [2, 2]),
    ],
)
def test_accumulation_mode_decides_what_a_later_pane_holds(mode, panes):
    # Two elements per step, so the count trigger fires once per step; in
    # batch every element would reach the trigger at once, in one pane.
    stream = (
        TestStream()
        .add_elements([("k", 0), ("k", 1)])
        .advance_watermark_to(10)
        .add_elements([("k", 2), ("k", 3)])
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions(["--streaming"])
    with beam.Pipeline(runner=SparkRunner(), options=options) as p:
        sizes = (
            p
            | stream
            | beam.WindowInto(
                window.GlobalWindows(),
                trigger=trigger.Repeatedly(trigger.AfterCount(2)),
                accumulation_mode=mode,
            )
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, v: len(list(v)))
        )
        assert_that(sizes, equal_to(panes))


def test_text_and_parquet_reads(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("".join(f"line {i}\n" for i in range(500)))
    table = pa.table({"q": [f"q{i % 7}" for i in range(300)], "n": list(range(300))})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=50)
    with beam.Pipeline(runner=SparkRunner()) as p:
        lines = p | beam.io.ReadFromText(str(text))
        assert_that(lines | beam.combiners.Count.Globally(), equal_to([500]), "text")
        rows = p | beam.io.ReadFromParquet(str(tmp_path / "in.parquet"))
        sums = rows | beam.Map(lambda r: (r["q"], r["n"])) | beam.CombinePerKey(sum)
        expected = {}
        for i in range(300):
            expected[f"q{i % 7}"] = expected.get(f"q{i % 7}", 0) + i
        assert_that(sums, equal_to(sorted(expected.items())), "parquet")


def test_metrics_reach_pipeline_result():
    counter = beam.metrics.Metrics.counter("t", "seen")
    dist = beam.metrics.Metrics.distribution("t", "size")
    gauge = beam.metrics.Metrics.gauge("t", "last")

    def record(x):
        counter.inc()
        dist.update(x)
        gauge.set(7)
        return x

    p = beam.Pipeline(runner=SparkRunner())
    _ = p | beam.Create(list(range(1, 101))) | beam.Map(record)
    result = p.run()
    result.wait_until_finish()
    query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("t"))
    assert sum(c.committed for c in query["counters"]) == 100
    (d,) = query["distributions"]
    assert (d.committed.count, d.committed.sum, d.committed.min, d.committed.max) == (
        100,
        5050,
        1,
        100,
    )
    (g,) = query["gauges"]
    assert g.committed.value == 7


class _Boom(beam.DoFn):
    def process(self, element):
        if element == 3:
            _explode(element)
        yield element


def _explode(value):
    raise ValueError(f"bad element {value}")


def test_user_error_surfaces_python_exception():
    with pytest.raises(ValueError) as info, beam.Pipeline(runner=SparkRunner()) as p:
        p | beam.Create([1, 2, 3]) | "Explode" >> beam.ParDo(_Boom())
    error = info.value
    assert isinstance(error, PipelineError)
    first_line = str(error).splitlines()[0]
    assert first_line.startswith("ValueError: bad element 3")
    assert error.transform == "Explode"
    assert "in transform 'Explode'" in str(error)
    assert "_explode" in str(error)
    assert "py4j" not in str(error).lower()
    assert len(str(error).splitlines()) < 15


def _slow_identity(element):
    time.sleep(1.0)
    return element


def test_a_long_run_logs_its_progress(caplog):
    caplog.set_level(logging.INFO, logger="runners.spark")
    options = PipelineOptions(["--spark_progress_seconds=0.2"])
    with beam.Pipeline(runner=SparkRunner(), options=options) as p:
        out = p | beam.Create([1, 2]) | beam.Map(_slow_identity)
        assert_that(out, equal_to([1, 2]))
    progress = [r.getMessage() for r in caplog.records if r.name.endswith("progress")]
    assert any("Spark stage(s) running, tasks" in line for line in progress), progress
    assert any(
        r.getMessage().startswith("SparkRunner: done in") for r in caplog.records
    )


def test_streaming_batches_are_summed_up_once_per_progress_interval(caplog):
    caplog.set_level(logging.INFO, logger="runners.spark")
    clock = iter([0.0, 4.0, 9.0, 10.5, 12.0, 18.0, 21.0, 22.0])
    progress = BatchProgress(10.0, clock=lambda: next(clock))
    for batch, seconds in enumerate([0.2, 0.3, 0.9, 0.25, 0.4, 0.1, 0.2]):
        progress.committed(batch, seconds, f"wm{batch}", f"timer{batch}")
    lines = [r.getMessage() for r in caplog.records]
    # Batches 0-2 (t = 4, 9, 10.5) fill the first 10 s, 3-5 (t = 12, 18, 21)
    # the next; batch 6 (t = 22) waits for a later line.
    assert lines == [
        "SparkRunner streaming: 3 batch(es) committed in the last 10 s, up to "
        "batch 2; median 0.30 s, slowest 0.90 s; output watermark wm2, oldest "
        "pending timer timer2",
        "SparkRunner streaming: 3 batch(es) committed in the last 10 s, up to "
        "batch 5; median 0.25 s, slowest 0.40 s; output watermark wm5, oldest "
        "pending timer timer5",
    ]


def test_streaming_progress_lines_can_be_turned_off(caplog):
    caplog.set_level(logging.INFO, logger="runners.spark")
    clock = iter(range(100))
    progress = BatchProgress(0, clock=lambda: next(clock))
    for batch in range(50):
        progress.committed(batch, 0.1, "wm", "none")
    assert not caplog.records


def test_runner_selected_by_dotted_name():
    options = PipelineOptions(["--runner=runners.spark.SparkRunner"])
    with beam.Pipeline(options=options) as p:
        assert_that(
            p | beam.Create([1, 2]) | beam.Map(lambda x: -x), equal_to([-1, -2])
        )


def test_master_default_and_spark_conf():
    assert master_url(PipelineOptions([])) == "local[*,4]"
    assert master_url(PipelineOptions(["--spark_master_url=local[2]"])) == "local[2]"
    opts = SparkOptions(["--spark_conf", "a=1", "--spark_conf", "b=2"])
    assert opts.spark_conf == ["a=1", "b=2"]


def test_a_session_without_partitions_to_shuffle_into_is_refused():
    # An active session set up with spark.default.parallelism 0: the job
    # used to end DONE with every grouped element dropped. A process of its
    # own, since this one's session is shared by the other tests.
    script = (
        "import apache_beam as beam\n"
        "from pyspark.sql import SparkSession\n"
        "from runners.spark import SparkRunner\n"
        "SparkSession.builder.master('local[1]')"
        ".config('spark.default.parallelism', '0').getOrCreate()\n"
        "with beam.Pipeline(runner=SparkRunner()) as p:\n"
        "    p | beam.Create([('a', 1)]) | beam.GroupByKey()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "spark.default.parallelism is 0; give a positive one" in done.stderr


def test_a_root_other_than_impulse_is_refused_by_name():
    # A Flatten of nothing (which Beam's DirectRunner runs) failed inside
    # Beam's fusion with "not enough values to unpack (expected 1, got 0)".
    pipeline = beam.Pipeline(runner=SparkRunner())
    _ = () | "Nothing" >> beam.Flatten(pipeline=pipeline)
    with pytest.raises(
        NotImplementedError, match=r"cannot run 'Nothing' \(beam:transform:flatten:v1\)"
    ):
        pipeline.run()


def test_workers_default_to_the_driver_interpreter(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    ensure_python_env()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_a_chosen_worker_interpreter_is_kept(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python3")
    ensure_python_env()
    assert os.environ["PYSPARK_PYTHON"] == "/opt/other/python3"


def test_ordered_list_state():
    values = [50, 5, 70, 20, 95, 10]
    with beam.Pipeline(runner=SparkRunner()) as p:
        out = (
            p
            | beam.Create([("k", v) for v in values])
            | beam.Map(lambda kv: kv).with_output_types(tuple[str, int])
            | beam.ParDo(tp.OrderedListFn())
        )
        assert_that(out, equal_to([("k", [10, 20, 50, 70])]))


def _partition_of(_) -> int:
    from pyspark import TaskContext

    return TaskContext.get().partitionId()


def test_reshuffle_spreads_a_few_elements_over_every_partition():
    # A file pattern matching two files, or a Parquet file's row groups,
    # must reach both cores, not travel as one pickled batch.
    with beam.Pipeline(runner=SparkRunner()) as p:
        partitions = (
            p
            | beam.Create(["a", "b", "c", "d"])
            | beam.Reshuffle()
            | beam.Map(_partition_of)
            | beam.Distinct()
        )
        assert_that(partitions, equal_to([0, 1]))


class _ByRemainder(beam.DoFn):
    def process(self, x):
        yield x if x % 3 == 0 else beam.pvalue.TaggedOutput(f"r{x % 3}", x)


def _by_remainder(p):
    return (
        p
        | beam.Create(range(6))
        | beam.Reshuffle()
        | beam.ParDo(_ByRemainder()).with_outputs("r1", "r2", main="r0")
    )


def test_outputs_of_one_stage_flattened_are_read_in_one_pass(spark_session):
    # A sink's written file names come from several outputs of one stage,
    # flattened into a side input: a task per output and partition, each a
    # round trip to a Python worker for a few names, was most of a small
    # job's last stage.
    tracker = spark_session.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    with beam.Pipeline(runner=SparkRunner()) as p:
        parts = _by_remainder(p)
        flat = (parts.r0, parts.r1, parts.r2) | beam.Flatten()
        seen = (
            p
            | "One" >> beam.Create([None])
            | beam.Map(lambda _, all_: sorted(all_), all_=beam.pvalue.AsList(flat))
        )
        assert_that(seen, equal_to([[0, 1, 2, 3, 4, 5]]))
    collects = [
        tracker.getStageInfo(stage)
        for job in set(tracker.getJobIdsForGroup()) - before
        for stage in tracker.getJobInfo(job).stageIds
        if tracker.getStageInfo(stage).name.startswith("collect")
    ]
    # One task per partition of the stage, where a filter per output made
    # three.
    parallelism = spark_session.sparkContext.defaultParallelism
    assert [stage.numTasks for stage in collects] == [parallelism]


def test_an_output_flattened_with_itself_is_there_twice():
    with beam.Pipeline(runner=SparkRunner()) as p:
        parts = _by_remainder(p)
        flat = (parts.r0, parts.r1, parts.r2, parts.r1) | beam.Flatten()
        assert_that(flat, equal_to([0, 1, 1, 2, 3, 4, 4, 5]))


_START_SPARK_IN_A_FRESH_PROCESS = """
import os, sys
os.register_at_fork(after_in_child=lambda: open(sys.argv[1], "a").write("fork\\n"))
from apache_beam.options.pipeline_options import PipelineOptions
from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session
options = PipelineOptions(["--spark_master_url=local[1]"]).view_as(SparkOptions)
print(get_or_create_session(options).range(3).count())
"""


def test_the_driver_jvm_starts_without_running_fork_handlers(tmp_path):
    # A fork() runs every fork handler of the process in the child, gRPC's
    # among them, which since grpcio 1.80 can crash the child before it
    # runs java when the process holds Bigtable channels, as the Photon
    # command does when the runner starts Spark (grpc/grpc#43055): "Java
    # gateway process exited before sending its port number", seen in CI.
    # A child made without them (vfork) has nothing to crash on. Python's
    # own handlers run in a forked child only: the marker says if one ran.
    marker = tmp_path / "forked"
    done = subprocess.run(
        [sys.executable, "-c", _START_SPARK_IN_A_FRESH_PROCESS, str(marker)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "3"
    assert not marker.exists(), "the JVM was started by a fork() running handlers"

"""Zeitgeist live (`--follow`) on SparkRunner in streaming: files dropped into
a directory in waves give the batch run's anomalies and window counts, on
local Spark and on a standalone cluster; a dip is reported while the job
runs; the command stops cleanly on SIGTERM and resumes from its checkpoint
without counting a window twice."""

import collections
import json
import os
import pathlib
import re
import signal
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from report_page import Page

from pipelines import config as config_loader
from pipelines.outputs import write_parts
from pipelines.zeitgeist import build, zeitgeist_transform
from pipelines.zeitgeist_flags import DEFAULT_CONFIG
from runners.spark import SparkRunner
from runners.spark.checkpoint import CheckpointDir
from testing.inbox import cut, drop_file
from testing.processes import LoggedJob, kill_spark_jvm, kill_tree
from testing.zeitgeist_generator import DAY_MS, HOUR_MS, StreamSpec, generate
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.zeitgeist_pb2 import SearchQuery
from transforms.zeitgeist.composite import ANOMALIES, WINDOW_COUNTS

pytestmark = [pytest.mark.spark, pytest.mark.slow]
OUTPUTS = (ANOMALIES, WINDOW_COUNTS)
# A record may trail a newer one by up to a minute (the generator's bound).
DISORDER_SECONDS = 120


def _stream():
    """A day of 8 queries with spikes and dips, as pre-aggregated counts (a
    record per query and window), some out of order by up to a minute."""
    spec = StreamSpec(
        num_queries=8,
        duration_ms=DAY_MS,
        warmup_ms=4 * HOUR_MS,
        aggregate=1.0,
        episodes_per_query_day=2.0,
        out_of_order_fraction=0.2,
    )
    return generate(spec, seed=4)


def _outputs(output: pathlib.Path) -> dict[str, list[str]]:
    return {
        name: sorted(
            json.dumps(json.loads(line), sort_keys=True)
            for path in output.glob(f"{name}*.jsonl")
            for line in path.read_text().splitlines()
        )
        for name in OUTPUTS
    }


def _wait_for(predicate, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.2)


def _wait_for_more_counts(output, than: int, timeout_s: float = 120) -> None:
    _wait_for(lambda: len(_window_counts(output)) > than, timeout_s)


def _batch_run(files, tmp_path) -> dict[str, list[str]]:
    """The batch run's outputs over `files`, all present from the start."""
    everything = tmp_path / "all"
    everything.mkdir()
    for i, records in enumerate(files):
        drop_file(everything, f"part{i}.jsonl", records)
    config = config_loader.read(DEFAULT_CONFIG)
    with beam.Pipeline() as pipeline:
        build(
            pipeline,
            [str(everything / "*.jsonl")],
            None,
            zeitgeist_transform(config),
            tmp_path / "batch",
            [WINDOW_COUNTS],
        )
    return _outputs(tmp_path / "batch")


def _live_pipeline(tmp_path, inbox, output):
    config = config_loader.read(DEFAULT_CONFIG)
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(
            ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}"]
        ),
    )
    follow = FollowSettings(poll_seconds=0.3, max_disorder_seconds=DISORDER_SECONDS)
    build(
        pipeline,
        [str(inbox / "*.jsonl")],
        None,
        zeitgeist_transform(config),
        output,
        [WINDOW_COUNTS],
        read=lambda pattern, fmt: FollowSearchQueries(pattern, fmt, follow),
        write=write_parts(0.0),
    )
    return pipeline


def _wait_until_quiet(output, quiet_s: float = 4, timeout_s: float = 120) -> None:
    """Waits until the window counts written stop growing for `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        now = len(_window_counts(output))
        if now != seen:
            seen, since = now, time.monotonic()
        time.sleep(0.2)


def _up_to(lines: list[str], end_ms: int) -> list[str]:
    """The records of windows ending by `end_ms`; an episode still open when
    the input ended exists only in a run whose input ends."""
    return [
        line
        for line in lines
        if json.loads(line)["window_end"] <= end_ms
        and json.loads(line).get("status") != "OPEN_AT_END"
    ]


def test_files_in_waves_give_the_batch_runs_anomalies_and_window_counts(
    tmp_path, spark_session
):
    stream = _stream()
    files = cut(stream.events, 4)
    batch = _batch_run(files, tmp_path)
    assert batch[ANOMALIES], "the stream has injected episodes"

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    live_output = tmp_path / "live"
    result = _live_pipeline(tmp_path, inbox, live_output).run()
    try:
        for i, records in enumerate(files):
            drop_file(inbox, f"part{i}.jsonl", records)
            # Each wave moves the watermark: window counts appear while the
            # job runs, before the next wave.
            before = len(_window_counts(live_output))
            _wait_for_more_counts(live_output, before)
            assert len(_window_counts(live_output)) > before, i
        _wait_until_quiet(live_output)
    finally:
        assert result.cancel() == PipelineState.CANCELLED
    live = _outputs(live_output)
    # The input never ends, so the windows past the watermark stay open: the
    # live run has every window up to there, as the batch run has them.
    closed_through = max(json.loads(c)["window_end"] for c in live[WINDOW_COUNTS])
    assert closed_through >= stream.spec.start_ms + DAY_MS - 15 * 60_000
    for name in OUTPUTS:
        assert live[name] == _up_to(batch[name], closed_through), name


def _search(query: str, minute: int, count: int) -> SearchQuery:
    start = 1_767_571_200_000  # 2026-01-05T00:00Z
    return SearchQuery(
        query=query,
        event_time=start + minute * 60_000,
        record_id=f"{query}-{minute}",
        count=count,
    )


def test_a_dip_is_reported_while_the_job_runs(tmp_path, spark_session):
    # Two queries at 100 searches per 5-minute window for ten hours; then
    # "fading" stops while "steady" goes on. No record of "fading" arrives
    # again: its dip can only come from the watermark passing empty windows.
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    output = tmp_path / "live"
    history = [
        _search(q, m, 100) for m in range(0, 600, 5) for q in ("steady", "fading")
    ]
    drop_file(inbox, "history.jsonl", history)
    result = _live_pipeline(tmp_path, inbox, output).run()
    try:
        drop_file(
            inbox,
            "after.jsonl",
            [_search("steady", m, 100) for m in range(600, 700, 5)],
        )
        _wait_for(lambda: _outputs(output)[ANOMALIES])
        anomalies = [json.loads(a) for a in _outputs(output)[ANOMALIES]]
    finally:
        result.cancel()
    assert anomalies, "no anomaly while the job ran"
    assert {(a["query"], a["kind"]) for a in anomalies} == {("fading", "DIP")}


def _cli(output, inbox, checkpoint, *extra: str, master: str = "local[2]") -> LoggedJob:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    args = [
        sys.executable,
        "-m",
        "pipelines.zeitgeist",
        "--input",
        str(inbox / "*.jsonl"),
        "--follow",
        "--output",
        str(output),
        "--write_window_counts",
        "--runner=SparkRunner",
        f"--spark_master_url={master}",
        f"--checkpoint_dir={checkpoint}",
        "--poll_seconds=0.3",
        f"--max_disorder_seconds={DISORDER_SECONDS}",
        *extra,
    ]
    return LoggedJob(args, checkpoint.parent, "zeitgeist", env)


def _window_counts(output) -> list[tuple[str, int, int]]:
    return [
        (c["query"], c["window_start"], c["count"])
        for c in map(json.loads, _outputs(output)[WINDOW_COUNTS])
    ]


def test_sigterm_stops_cleanly_and_a_restart_counts_no_window_twice(tmp_path):
    stream = _stream()
    files = cut(stream.events, 4)
    batch = _batch_run(files, tmp_path)
    batch_counts = {
        (c["query"], c["window_start"]): c["count"]
        for c in map(json.loads, batch[WINDOW_COUNTS])
    }

    inbox, output = tmp_path / "inbox", tmp_path / "live"
    inbox.mkdir()
    checkpoint = tmp_path / "checkpoint"
    for run, wave in enumerate((files[:2], files[2:])):
        for i, records in enumerate(wave):
            drop_file(inbox, f"run{run}-part{i}.jsonl", records)
        job = _cli(output, inbox, checkpoint, "--report")
        seen = len(_window_counts(output))
        _wait_for_more_counts(output, seen, timeout_s=180)
        if run == 0:
            job.send_signal(signal.SIGTERM)
        else:
            # To the whole process group, as `timeout` and systemd send it:
            # the driver's JVM and Python workers must not die before the
            # driver has stopped the job.
            os.killpg(job.pid, signal.SIGTERM)
        stdout, stderr = job.finish(timeout=120)
        assert job.returncode == 0, stderr[-4000:]
        assert "Traceback" not in stderr, stderr[-4000:]
        _assert_report_shows_the_episodes_written(output, stdout)
        # The summary counts the job's committed batches, this run's and the
        # runs before, and every window they emitted is written: a stop
        # leaves nothing in the sinks' buffers.
        emitted = re.search(r"windows emitted\s+(\d+)", stdout)
        assert emitted, stdout
        assert len(_window_counts(output)) == int(emitted.group(1))
        assert len(_window_counts(output)) > seen, f"run {run} counted nothing"

    counts = _window_counts(output)
    windows = [(q, start) for q, start, _ in counts]
    assert len(windows) == len(set(windows)), "a window was counted twice"
    # Every window the two runs closed is the batch run's, with its count,
    # and none is missing before the last one they closed.
    assert {(q, s): n for q, s, n in counts}.items() <= batch_counts.items()
    last = max(start for _, start in windows)
    assert {w for w in batch_counts if w[1] < last} <= set(windows)


def test_a_part_bigger_than_a_batch_closes_every_window_but_the_last_once_idle(
    tmp_path,
):
    # The README's live run, at the scale of a test: a part of more
    # searches than a micro-batch may read (--streaming_max_records_per_batch)
    # is checkpointed by the runner while it is read. The remainder's
    # watermark was the one of that moment, a search in the middle of the
    # part: with no file after it, the idle timeout took the watermark up to
    # that search and no further, and its later windows never closed, nor
    # after a restart (5700 windows emitted where 5740 were due, one run in
    # three, when the checkpoint came before the part's last searches).
    spec = StreamSpec(num_queries=2, duration_ms=6 * HOUR_MS, warmup_ms=2 * HOUR_MS)
    stream = generate(spec, seed=3)
    assert len(stream.events) > 30 * 1000  # read over about a second
    window_ms = spec.window_ms
    newest = max(e.event_time for e in stream.events)
    # Every window but the newest search's, which stays open.
    due = {
        (q, start)
        for q in {e.query for e in stream.events}
        for start in range(spec.start_ms, newest - newest % window_ms, window_ms)
    }
    inbox, output = tmp_path / "inbox", tmp_path / "live"
    inbox.mkdir()
    drop_file(inbox, "part-00000.jsonl", stream.events)
    job = _cli(
        output,
        inbox,
        tmp_path / "checkpoint",
        "--idle_timeout_seconds=1",
        "--streaming_max_records_per_batch=1000",
    )
    try:
        _wait_for(lambda: {(q, s) for q, s, _ in _window_counts(output)} >= due)
    finally:
        job.send_signal(signal.SIGTERM)
        stdout, stderr = job.finish(timeout=120)
    assert job.returncode == 0, stderr[-4000:]
    assert {(q, s) for q, s, _ in _window_counts(output)} == due
    assert re.search(rf"windows emitted\s+{len(due)}\b", stdout), stdout


def _assert_report_shows_the_episodes_written(output, stdout: str) -> None:
    """`--report` at a stop: the page is rewritten from every part written
    so far, this run's and the runs' before."""
    assert f"report: {output / 'report.html'}" in stdout
    written = {json.loads(line)["query"] for line in _outputs(output)[ANOMALIES]}
    assert written, "no anomaly yet: the page would be checked against nothing"
    page = Page((output / "report.html").read_text(encoding="utf-8"))
    assert {row[0] for row in page.rows if row} == written


def test_the_live_command_runs_on_a_standalone_cluster(tmp_path, spark_cluster):
    stream = _stream()
    files = cut(stream.events, 2)
    batch = _batch_run(files, tmp_path)
    inbox, output = tmp_path / "inbox", tmp_path / "live"
    inbox.mkdir()
    for i, records in enumerate(files):
        drop_file(inbox, f"part{i}.jsonl", records)
    day_end = stream.spec.start_ms + DAY_MS
    before = spark_cluster.applications()
    # Nothing more arrives: 2 s later the watermark reaches the newest
    # search, and the windows before it close.
    job = _cli(
        output,
        inbox,
        tmp_path / "checkpoint",
        "--idle_timeout_seconds=2",
        master=spark_cluster.master_url,
    )
    try:
        _wait_for(lambda: _closed_through(output) >= day_end - 15 * 60_000, 240)
        job.send_signal(signal.SIGTERM)
        stdout, stderr = job.finish(timeout=120)
    finally:
        # A job left running would hold the shared cluster's cores, and the
        # next test on it would wait for them.
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, stderr[-4000:]
    assert "Zeitgeist summary" in stdout
    # On the cluster: local mode would give the same outputs.
    assert len(spark_cluster.applications() - before) == 1
    closed_through = _closed_through(output)
    assert closed_through >= day_end - 15 * 60_000
    live = _outputs(output)
    assert live[ANOMALIES], "the stream's episodes are alerted live"
    for name in OUTPUTS:
        assert live[name] == _up_to(batch[name], closed_through), name


def _closed_through(output) -> int:
    """The end of the latest window whose count is written (0: none yet)."""
    ends = [json.loads(c)["window_end"] for c in _outputs(output)[WINDOW_COUNTS]]
    return max(ends, default=0)


def test_the_live_generator_plays_until_stopped_and_a_restart_goes_on(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    output = tmp_path / "live"
    played = output / "generated" / "live"
    command = [
        sys.executable,
        "-m",
        "pipelines.zeitgeist",
        "--streaming",
        *("--output", str(output)),
        *("--window_seconds", "2", "--rate", "300", "--num_queries", "10"),
        "--write_window_counts",
        "--runner=SparkRunner",
        "--spark_master_url=local[2]",
        f"--checkpoint_dir={tmp_path / 'checkpoint'}",
    ]

    def run_until_counted(than: int) -> str:
        job = LoggedJob(command, tmp_path, "zeitgeist", env)
        # Window counts of searches stamped with the wall clock, while it runs.
        _wait_for_more_counts(output, than, timeout_s=180)
        job.send_signal(signal.SIGINT)
        stdout, stderr = job.finish(timeout=120)
        assert job.returncode == 0, stderr[-4000:]
        assert "Zeitgeist summary" in stdout and "precision" in stdout
        return stderr

    stderr = run_until_counted(0)
    counts = _window_counts(output)
    assert counts, stderr[-4000:]
    assert all(abs(start / 1000 - time.time()) < 600 for _, start, _ in counts)
    assert (output / "generated" / "episodes.json").exists()
    first_run = {path.name: path.read_bytes() for path in played.glob("live-*.jsonl")}
    assert first_run

    # The same command resumes: the job has read the first run's files,
    # and the generator's new files must be new names, or they go unread.
    resumed_at_ms = time.time() * 1000
    stderr = run_until_counted(len(counts))
    assert {
        path.name: path.read_bytes()
        for path in played.glob("live-*.jsonl")
        if path.name in first_run
    } == first_run
    searches = collections.Counter(
        (record["query"], record["event_time"] - record["event_time"] % 2000)
        for path in played.glob("live-*.jsonl")
        if path.name not in first_run
        for record in map(json.loads, path.read_text().splitlines())
    )
    assert searches
    second = [
        (query, start, count)
        for query, start, count in _window_counts(output)
        if start >= resumed_at_ms
    ]
    assert second, stderr[-4000:]
    # Every window of the second run counts every search played into it.
    assert [(q, s, searches[q, s]) for q, s, _ in second] == second


def test_a_sigkill_mid_stream_and_a_restart_lose_nothing_and_repeat_nothing(tmp_path):
    # Files read are archived, which the restart must not take for read
    # unless the batch that read them was committed.
    stream = _stream()
    files = cut(stream.events, 4)
    batch = _batch_run(files, tmp_path)
    inbox, output = tmp_path / "inbox", tmp_path / "live"
    archive = tmp_path / "archive"
    inbox.mkdir()
    archive.mkdir()
    archiving = ("--after_read=archive", f"--archive_dir={archive}")
    checkpoint = tmp_path / "checkpoint"
    for i, records in enumerate(files[:2]):
        drop_file(inbox, f"part{i}.jsonl", records)
    job = _cli(output, inbox, checkpoint, *archiving)
    _wait_for_more_counts(output, 0, timeout_s=180)
    for i, records in enumerate(files[2:], start=2):
        drop_file(inbox, f"part{i}.jsonl", records)
    # Killed as a machine dies, while it reads or counts the second wave.
    time.sleep(1)
    kill_tree(job.pid)
    job.wait(timeout=60)

    killed_at = CheckpointDir(checkpoint).last_commit()[0]
    job = _cli(output, inbox, checkpoint, *archiving)
    # Running again: it has replayed or moved past the batch it died in.
    _wait_for(lambda: CheckpointDir(checkpoint).last_commit()[0] > killed_at + 1)
    _wait_until_quiet(output)
    _wait_for(lambda: not list(inbox.iterdir()), timeout_s=30)
    job.send_signal(signal.SIGTERM)
    stdout, stderr = job.finish(timeout=120)
    assert job.returncode == 0, stderr[-4000:]
    live = _outputs(output)
    closed_through = max(json.loads(c)["window_end"] for c in live[WINDOW_COUNTS])
    assert closed_through >= stream.spec.start_ms + DAY_MS - 15 * 60_000
    for name in OUTPUTS:
        assert live[name] == _up_to(batch[name], closed_through), name
    # The summary counts committed batches: a file the killed job read in a
    # batch it never committed is counted once, by the batch that read it
    # again. (Its archiving is not counted if the killed job did it.)
    assert re.search(r"^files read\s+4$", stdout, re.MULTILINE), stdout
    assert re.search(r"^  archived once read\s+[0-4]$", stdout, re.MULTILINE), stdout
    # Each file archived once, under its own name: none left unread.
    assert list(inbox.iterdir()) == []
    assert sorted(p.name for p in archive.iterdir()) == [
        f"part{i}.jsonl" for i in range(4)
    ]


def _start_on_a_quarter_day(tmp_path):
    """The live command on the stream's first quarter day: the job, its
    output and its checkpoint directory."""
    inbox, output, checkpoint = tmp_path / "inbox", tmp_path / "live", tmp_path / "ck"
    inbox.mkdir()
    drop_file(inbox, "part0.jsonl", cut(_stream().events, 4)[0])
    return _cli(output, inbox, checkpoint), output, checkpoint


def test_the_jvm_killed_under_a_live_job_fails_it_in_one_line(tmp_path):
    # The JVM alone dies, as the out-of-memory killer's usual victim: every
    # call the driver makes to it after fails, and each used to print its
    # own Py4J traceback.
    job, output, checkpoint = _start_on_a_quarter_day(tmp_path)
    try:
        _wait_for_more_counts(output, 0, timeout_s=180)
        kill_spark_jvm(job.pid)
        _, stderr = job.finish(timeout=120)
    finally:
        kill_tree(job.pid)
    assert job.returncode == 1, stderr[-4000:]
    assert "Traceback" not in stderr, stderr[-4000:]
    (line,) = [line for line in stderr.splitlines() if "job failed" in line]
    committed, _ = CheckpointDir(checkpoint).last_commit()
    assert line.endswith(
        "job failed: Spark's driver JVM was killed by SIGKILL; every batch "
        f"before {committed + 1} is committed in {checkpoint}, and a run "
        f"with --checkpoint_dir={checkpoint} resumes after it"
    ), line


def test_a_restart_with_another_window_size_is_refused_in_one_line(tmp_path):
    # The counter's timers and pending windows, and the model's seasonal
    # slots, were written under 5-minute windows: read under 10-minute ones
    # they split and lose counts.
    job, output, checkpoint = _start_on_a_quarter_day(tmp_path)
    inbox = tmp_path / "inbox"
    try:
        _wait_for(lambda: (checkpoint / "job.json").exists())
    finally:
        kill_tree(job.pid)
        job.wait(timeout=60)
    assert (checkpoint / "job.json").exists(), job.stderr()[-4000:]

    job = _cli(output, inbox, checkpoint, "--window_seconds=600")
    _, stderr = job.finish(timeout=180)
    assert job.returncode == 1, stderr[-4000:]
    assert "Traceback" not in stderr, stderr[-4000:]
    (line,) = [line for line in stderr.splitlines() if "job failed" in line]
    assert "window_ms': 300000}, this run {'window_ms': 600000}" in line
    assert "Run with the recorded values to resume" in line


def test_a_damaged_key_group_file_is_refused_in_one_line_naming_it(tmp_path):
    # Before, a garbled key-group file failed with "file is not a database",
    # a traceback that named no file. The error comes from a Spark task: a
    # damaged record the driver reads (job.json, a commit) is refused by the
    # same words, tested in tests/runners/test_streaming_units.py.
    job, output, checkpoint = _start_on_a_quarter_day(tmp_path)
    inbox = tmp_path / "inbox"
    _wait_for(lambda: _window_counts(output))
    job.send_signal(signal.SIGTERM)
    _, stderr = job.finish(timeout=120)
    assert job.returncode == 0, stderr[-4000:]
    path = min((checkpoint / "state").rglob("kg-*.sqlite"))
    path.write_bytes(b"\xff" * 100 + path.read_bytes()[100:])
    # The damaged key group is woken by the next file's searches or timers.
    drop_file(inbox, "part1.jsonl", cut(_stream().events, 4)[1])

    job = _cli(output, inbox, checkpoint)
    _, stderr = job.finish(timeout=180)
    assert job.returncode == 1, stderr[-4000:]
    # Spark logs a worker's traceback, and may go on logging its other tasks'
    # cancellation after the command's word (the JVM ends when the driver has
    # ended), so that word is found, not taken for the last line. It is one
    # line, with no traceback of the driver's (Spark's sit inside its WARN
    # lines).
    (line,) = [line for line in stderr.splitlines() if "error: job failed" in line]
    assert f"error: job failed: checkpoint file {path} cannot be" in line, line
    assert not re.search(r"^Traceback", stderr, re.MULTILINE), stderr[-4000:]

"""Photon live (`--follow`) on SparkRunner in streaming: two pipelines, each
following its own copy of the query and click logs as they arrive in waves,
share one id registry in the real Bigtable emulator. One of them is killed
with SIGKILL after registering clicks and before writing them, then
restarted on its checkpoint; the union of both pipelines' outputs holds
every joinable click exactly once, with no `photon_verify`. Expected values
come from the generator's ground truth."""

import bisect
import collections
import os
import re
import signal
import sys
import time

import pytest

from runners.spark.checkpoint import CheckpointDir
from testing.inbox import drop_file
from testing.photon_generator import PhotonSpec, generate
from testing.processes import LoggedJob, kill_tree
from tests.photon.test_photon_cli import GC_DAYS, click_ids, read_jsonl
from transforms.photon import BigtableTarget, ClickRef, IdRegistry
from transforms.photon.id_registry import pipeline_token

pytestmark = [pytest.mark.bigtable, pytest.mark.spark, pytest.mark.slow]
WAVES = 3


def _waves(logs):
    """Both logs cut at the same arrival times into `WAVES` waves, as two
    live feeds would have delivered them."""
    first = min(logs.query_arrivals[0], logs.click_arrivals[0])
    last = max(logs.query_arrivals[-1], logs.click_arrivals[-1]) + 1
    cuts = [first + (last - first) * i // WAVES for i in range(WAVES + 1)]

    def part(records, arrivals, i):
        lo = bisect.bisect_left(arrivals, cuts[i])
        return records[lo : bisect.bisect_left(arrivals, cuts[i + 1])]

    return [
        (
            part(logs.queries, logs.query_arrivals, i),
            part(logs.clicks, logs.click_arrivals, i),
        )
        for i in range(WAVES)
    ]


def _drop_wave(inbox, n, wave):
    queries, clicks = wave
    drop_file(inbox / "queries", f"wave{n}.jsonl", queries)
    drop_file(inbox / "clicks", f"wave{n}.jsonl", clicks)


def _cli(name, inbox, tmp_path, bigtable_instance, now_ms):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONWARNINGS="ignore")
    args = [
        sys.executable,
        "-m",
        "pipelines.photon",
        *("--queries", str(inbox / "queries" / "*.jsonl")),
        *("--clicks", str(inbox / "clicks" / "*.jsonl")),
        "--follow",
        *("--output", str(tmp_path / name)),
        *("--pipeline_id", name),
        *("--bigtable_project", bigtable_instance.project),
        *("--bigtable_instance", bigtable_instance.instance_id),
        *("--now_ms", str(now_ms), "--gc_days", str(GC_DAYS)),
        "--runner=SparkRunner",
        "--spark_master_url=local[1]",
        f"--checkpoint_dir={tmp_path / f'{name}-checkpoint'}",
        "--poll_seconds=0.3",
        # The last wave's clicks wait for their queries' watermark: once
        # no newer event comes, it moves up to the newest event read.
        "--idle_timeout_seconds=2",
    ]
    # A restart appends to the same log files.
    return LoggedJob(args, tmp_path, name, env)


def _stderr_tails(tmp_path) -> str:
    """The end of each job's stderr, to say why a wait failed."""
    return "\n".join(
        f"--- {path.name}:\n{path.read_text()[-3000:]}"
        for path in sorted(tmp_path.glob("*-stderr.log"))
    )


def _wait_for(predicate, timeout_s: float = 180) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def _joined(tmp_path, names, output="joined") -> collections.Counter:
    return collections.Counter(
        click for name in names for click in click_ids(tmp_path / name, output)
    )


def _stop(process, tmp_path) -> str:
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.finish(timeout=120)
    assert process.returncode == 0, _stderr_tails(tmp_path)
    return stdout


def test_a_pipeline_killed_mid_stream_beside_another_still_outputs_each_click_once(
    tmp_path, bigtable_instance
):
    logs = generate(PhotonSpec(num_queries=150, duplicate_fraction=0.2), seed=31)
    joinable = set(logs.joinable)
    waves = _waves(logs)
    both = ["east", "west"]
    # Each pipeline follows its own copy of the logs, as two datacenters do,
    # so that the test decides which of them sees a wave first.
    inboxes = {name: tmp_path / f"{name}-inbox" for name in both}
    for inbox in inboxes.values():
        (inbox / "queries").mkdir(parents=True)
        (inbox / "clicks").mkdir()
        _drop_wave(inbox, 0, waves[0])
    east_checkpoint = CheckpointDir(tmp_path / "east-checkpoint")
    registry = IdRegistry(
        BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id),
        GC_DAYS,
    )
    second_wave = [
        ClickRef(c.click_id, c.event_time)
        for c in waves[1][1]
        if c.click_id in joinable
    ]
    jobs = {}

    def start(name):
        jobs[name] = _cli(name, inboxes[name], tmp_path, bigtable_instance, logs.now_ms)

    def output_of(name):
        return _joined(tmp_path, [name]) + _joined(tmp_path, [name], "wasted")

    try:
        for name in both:
            start(name)
        assert _wait_for(lambda: output_of("east") and output_of("west")), (
            _stderr_tails(tmp_path)
        )
        # East alone sees the second wave, and is killed as a machine dies
        # once it has registered some of its clicks: before its batch
        # commits, so before it writes them.
        _drop_wave(inboxes["east"], 1, waves[1])

        def holders():
            return set(map(pipeline_token, registry.owners(second_wave).values()))

        assert _wait_for(lambda: "east" in holders(), 120), (
            f"east registered none of the second wave\n{_stderr_tails(tmp_path)}"
        )
        kill_tree(jobs["east"].pid)
        jobs["east"].wait(timeout=60)
        registered = {
            click
            for click, owner in registry.owners(second_wave).items()
            if pipeline_token(owner) == "east"
        }
        assert not registered & set(output_of("east")), "killed after its output"
        killed_at = east_checkpoint.last_commit()[0]
        # West gets the second wave: the clicks east holds are not west's.
        start("east")
        _drop_wave(inboxes["west"], 1, waves[1])
        for inbox in inboxes.values():
            _drop_wave(inbox, 2, waves[2])
        assert _wait_for(lambda: set(_joined(tmp_path, both)) >= joinable, 240), (
            f"{len(joinable - set(_joined(tmp_path, both)))} joinable clicks "
            f"never joined\n{_stderr_tails(tmp_path)}"
        )
        # East runs again: it has replayed or moved past the batch it died in.
        assert _wait_for(lambda: east_checkpoint.last_commit()[0] > killed_at + 1), (
            _stderr_tails(tmp_path)
        )
        stdouts = {name: _stop(jobs.pop(name), tmp_path) for name in both}
    finally:
        registry.close()
        for job in jobs.values():
            kill_tree(job.pid)

    joined = _joined(tmp_path, both)
    assert set(joined) == joinable
    assert set(joined.values()) == {1}, "a click joined twice"
    # What east had registered when it died, its replay wrote.
    assert registered <= set(_joined(tmp_path, ["east"]))
    for name, stdout in stdouts.items():
        output = tmp_path / name
        # A clean stop commits its last batch and writes all it joined: the
        # summary's count (over every run on the checkpoint) is what was
        # written.
        counted = re.search(r"clicks joined\s+(\d+)", stdout)
        assert counted, stdout
        assert int(counted.group(1)) == len(click_ids(output, "joined"))
        # A click this pipeline wasted is not one it joined.
        assert not set(click_ids(output, "wasted")) & set(click_ids(output, "joined"))
        unjoinable = {
            row["click"]["click_id"] for row in read_jsonl(output, "unjoinable")
        }
        assert unjoinable <= logs.orphans | logs.too_old

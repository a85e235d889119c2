"""Exactly-once across kills: a streaming job with state, timers and a file
sink, its whole process group killed with SIGKILL at chosen points and
restarted on the same checkpoint directory each time, ends with the outputs
of a run that was never killed, line for line, its first run having also
lost a task of its stateful stage, which Spark retried.

The kills are real: the job runs in its own process (with Spark's JVM and
Python workers under it) and the test sends SIGKILL to it and every process
under it once the job's user code has announced that it is at the chosen
point. The task's death is real too: its Python worker sends itself
SIGKILL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testing.processes import kill_tree

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = [sys.executable, "-m", "tests.runners.streaming_restart_job"]
ROOT = Path(__file__).resolve().parents[2]
SHARD = re.compile(r"-\d{5}-of-\d{5}$")


def _start(work: Path, pause_at: str = "", master: str = "local[2]"):
    (work / "markers").mkdir(parents=True, exist_ok=True)
    args = [
        f"--checkpoint_dir={work / 'checkpoint'}",
        f"--output={work / 'out'}",
        f"--markers={work / 'markers'}",
        f"--pause_at={pause_at}",
        f"--master={master}",
    ]
    log = work / f"log-{pause_at or 'clean'}-{time.monotonic_ns()}.txt"
    with log.open("w") as out:
        # The child keeps its own copy of the descriptor.
        return subprocess.Popen(
            JOB + args,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )


def _finish(process, work: Path) -> None:
    assert process.wait(timeout=300) == 0, _logs(work)


def _logs(work: Path) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(work.glob("log-*")))


def _batches(work: Path, log: str) -> list[int]:
    return [int(p.stem) for p in (work / "checkpoint" / log).glob("*.json")]


def _outputs(work: Path) -> dict[str, list[str]]:
    """Lines per window. fileio names a window's files after the window and
    the bundles that wrote them, and how lines spread over bundles depends
    on the partitioning, not on the data."""
    by_window: dict[str, list[str]] = {}
    for path in (work / "out").iterdir():
        if path.name.startswith("."):
            continue
        window = SHARD.sub("", path.name)
        by_window.setdefault(window, []).extend(path.read_text().split())
    return {window: sorted(lines) for window, lines in by_window.items()}


def _never_killed() -> dict[str, list[str]]:
    """The outputs of a run never killed, per window file. The job's script:
    in step s, key k gets values 100s + k and 100s + k + 4 at seconds
    10s + k and 10s + k + 4, so window 10s holds two values of each key."""

    def name(second: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))

    return {
        f"output-{name(10 * s)}-{name(10 * s + 10)}": sorted(
            f"k{k},{10 * s},2,{200 * s + 2 * k + 4}" for k in range(4)
        )
        for s in range(6)
    }


# The places the kills land, in the order the job reaches them: the sink
# writing window 30's totals (after step 3's timers), value 401 being
# processed (step 4), the timer of key k2's window 50 (step 5).
KILL_POINTS = ("sink", "process", "timer")


def test_a_retried_task_and_three_kills_end_with_the_outputs_of_a_run_never_killed(
    tmp_path,
):
    # The first run also loses a task of the stateful stage (value 301, step
    # 3: its Python worker kills itself), which Spark retries (local[2,3]: up
    # to 3 attempts), and must go on to the sink's pause, where it is killed.
    # Each run after the first replays the batch the last kill cut short,
    # then goes on to the next place, where it is killed in turn.
    task_died = tmp_path / "markers" / "task"
    for point in KILL_POINTS:
        first = point == KILL_POINTS[0]
        victim = _start(
            tmp_path,
            pause_at=f"task,{point}" if first else point,
            master="local[2,3]" if first else "local[2]",
        )
        marker = tmp_path / "markers" / point
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert victim.poll() is None, _logs(tmp_path)
            assert time.monotonic() < deadline, (point, _logs(tmp_path))
            time.sleep(0.1)
        kill_tree(victim.pid)
        victim.wait()
        logged = _batches(tmp_path, "offsets")
        committed = _batches(tmp_path, "commits")
        assert committed, f"the kill at {point} should land after a commit"
        assert max(logged) == max(committed) + 1, (
            f"the kill at {point} should land inside a batch"
        )
        if first:
            # A batch was committed after the task died: what the retried
            # task wrote to state, no replay's, is what the later runs read.
            commit = tmp_path / "checkpoint" / "commits" / f"{max(committed)}.json"
            assert task_died.exists(), "the worker never died"
            assert task_died.stat().st_mtime_ns < commit.stat().st_mtime_ns

    _finish(_start(tmp_path), tmp_path)

    assert _outputs(tmp_path) == _never_killed()
    restarts = [p.read_text() for p in tmp_path.glob("log-*")]
    replays = sum("replaying uncommitted batch" in log for log in restarts)
    assert replays == len(KILL_POINTS), _logs(tmp_path)

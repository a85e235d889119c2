"""Exactly-once across kills: a streaming job with state, timers and a file
sink, its whole process group killed with SIGKILL at chosen points and
restarted on the same checkpoint directory, ends with the outputs of a run
that was never killed, line for line.

The kills are real: the job runs in its own process (with Spark's JVM and
Python workers under it) and the test sends SIGKILL to it and every process
under it once the job's user code has announced that it is at the chosen
point.
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


def _restart_log(work: Path) -> str:
    """The whole log of the run that restarted after the kill."""
    (log,) = work.glob("log-clean-*")
    return log.read_text()


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


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("clean")
    _finish(_start(work), work)
    outputs = _outputs(work)
    # The job's script: in step s, key k gets values 100s + k and 100s + k + 4
    # at seconds 10s + k and 10s + k + 4, so window 10s holds two of each key.
    expected = sorted(
        f"k{k},{10 * s},2,{200 * s + 2 * k + 4}" for s in range(6) for k in range(4)
    )
    assert sorted(line for lines in outputs.values() for line in lines) == expected
    return outputs


@pytest.mark.parametrize("point", ["process", "timer", "sink"])
def test_killed_driver_restarts_with_the_same_outputs(point, tmp_path, uninterrupted):
    victim = _start(tmp_path, pause_at=point)
    marker = tmp_path / "markers" / point
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert victim.poll() is None, _logs(tmp_path)
        assert time.monotonic() < deadline, _logs(tmp_path)
        time.sleep(0.1)
    kill_tree(victim.pid)
    victim.wait()
    logged = _batches(tmp_path, "offsets")
    committed = _batches(tmp_path, "commits")
    assert committed, "the kill should land after some batches committed"
    assert max(logged) == max(committed) + 1, "the kill should land inside a batch"

    _finish(_start(tmp_path), tmp_path)

    assert _outputs(tmp_path) == uninterrupted
    assert "replaying uncommitted batch" in _restart_log(tmp_path)


def test_a_task_killed_in_the_stateful_stage_is_retried(tmp_path, uninterrupted):
    # local[2,3]: Spark retries a failed task up to 3 times.
    _finish(_start(tmp_path, pause_at="task", master="local[2,3]"), tmp_path)
    assert (tmp_path / "markers" / "task").exists(), "the worker never died"
    assert _outputs(tmp_path) == uninterrupted

"""A Python worker killed in a stateful stage and in a file sink's write is
retried on the runner's default master, with no loss and no duplicate, in
the outputs and in the counters; the worker daemon killed with its workers
fails the job in one line.

The job runs in its own process (the suite's shared session uses local[2],
which never retries), and its user code kills its own worker, or the
daemon's process group, with SIGKILL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _run_job(module: str, *args: str) -> subprocess.CompletedProcess:
    """Runs `tests.runners.<module>` in a process of its own, to the end."""
    return subprocess.run(
        [sys.executable, "-m", f"tests.runners.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def test_killed_workers_are_retried_without_loss_or_duplicates(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    done = _run_job(
        "batch_retry_job",
        f"--output={tmp_path / 'out' / 'totals'}",
        f"--markers={markers}",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(p.name for p in markers.iterdir()) == ["sink", "stateful"]
    lines = [
        line
        for path in (tmp_path / "out").iterdir()
        for line in path.read_text().splitlines()
    ]
    # 0 + 1 + ... + 49 per key, each key exactly once.
    assert sorted(lines) == sorted(f"k{k},1225" for k in range(20))


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_a_killed_worker_daemon_fails_the_command_in_one_line(tmp_path, streaming):
    # Spark's Python worker daemon SIGKILLed with its workers (a real group
    # kill): no later attempt gets a worker, and the job failed with a Py4J
    # traceback and a JVM stack where the commands print one line.
    checkpoint = tmp_path / "checkpoint"
    done = _run_job(
        "daemon_kill_job", *([f"--checkpoint_dir={checkpoint}"] if streaming else [])
    )
    assert done.returncode == 1, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "daemon_kill_job: error: job failed: Spark aborted the job: "
    )
    # How the last attempt ends depends on when it asked for a worker.
    assert re.search(
        r"failed 4 times, the last with '(Python worker exited unexpectedly"
        r"|java\.io\.IOException: Stream closed)",
        last,
    ), last
    assert "(its Python workers died: killed, or out of memory?)" in last
    if streaming:
        assert f"a run with --checkpoint_dir={checkpoint} resumes" in last
    else:
        assert last.endswith("the job's outputs are incomplete")


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_counters_are_exact_when_a_task_retries_over_cached_partitions(
    tmp_path, streaming
):
    # The worker dies downstream of a stage whose partitions it had already
    # computed and cached. Counted through an accumulator, the stage's counts
    # went with the failed attempt, and the retry read the cached partitions
    # without counting again: half of them were lost in batch, all of them in
    # streaming, where every stage's output is cached.
    markers = tmp_path / "markers"
    markers.mkdir()
    checkpoint = [f"--checkpoint_dir={tmp_path / 'checkpoint'}"] if streaming else []
    done = _run_job("metrics_retry_job", f"--markers={markers}", *checkpoint)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (markers / "died").exists()
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    assert counted == {
        "SplitLeft/ParDo(Count)": 200,
        "CountRight": 200,
        "CountFlattened": 400,
    }

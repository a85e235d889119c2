"""A Python worker killed in a stateful stage and in a file sink's write is
retried on the runner's default master, with no loss and no duplicate.

The job runs in its own process (the suite's shared session uses local[2],
which never retries), and its user code kills its own worker with SIGKILL
the first time it reaches each place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_killed_workers_are_retried_without_loss_or_duplicates(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.runners.batch_retry_job",
            f"--output={tmp_path / 'out' / 'totals'}",
            f"--markers={markers}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
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

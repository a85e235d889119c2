"""SparkRunner against a standalone master and worker on 127.0.0.1."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pipelines_for_tests as tp
import pytest

from runners.in_process import InProcessDirectRunner

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def _lines(prefix: str) -> list[str]:
    out = []
    for path in glob.glob(prefix + "-*"):
        out.extend(Path(path).read_text().splitlines())
    return sorted(out)


def test_pipeline_on_standalone_cluster_with_a_retried_task(tmp_path, spark_cluster):
    marker = str(tmp_path / "failed-once")
    prefix = str(tmp_path / "out")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    before = spark_cluster.applications()
    job = subprocess.run(
        [
            sys.executable,
            str(HERE / "cluster_job.py"),
            spark_cluster.master_url,
            marker,
            prefix,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert job.returncode == 0, job.stderr[-4000:] + spark_cluster.logs()
    # On the cluster: local mode (local[*,4] retries too) would pass the rest.
    assert len(spark_cluster.applications() - before) == 1
    # The injected failure happened, and Spark retried the task.
    assert os.path.exists(marker)
    expected_prefix = str(tmp_path / "expected")
    no_failure = tmp_path / "no-failure"
    no_failure.touch()
    with beam.Pipeline(InProcessDirectRunner()) as p:
        tp.cluster_pipeline(p, str(no_failure), expected_prefix)
    # A retried task leaves neither duplicate lines nor stray temporary files.
    assert _lines(prefix) == _lines(expected_prefix)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("beam-temp")]

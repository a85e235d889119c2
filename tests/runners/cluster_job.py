"""Runs ``pipelines_for_tests.cluster_pipeline`` on a given Spark master.

Used by the cluster test in a subprocess, since a test process already holds
a local SparkContext and Spark allows one per process.
Usage: python cluster_job.py MASTER_URL MARKER_FILE OUTPUT_PREFIX
"""

from __future__ import annotations

import sys

import apache_beam as beam
import pipelines_for_tests as tp
from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import SparkRunner


def main(master: str, marker: str, out_prefix: str) -> None:
    options = PipelineOptions(
        [
            f"--spark_master_url={master}",
            "--spark_conf=spark.executor.memory=1g",
            "--spark_conf=spark.task.maxFailures=4",
            "--spark_default_parallelism=2",
        ]
    )
    with beam.Pipeline(runner=SparkRunner(), options=options) as p:
        tp.cluster_pipeline(p, marker, out_prefix)


if __name__ == "__main__":
    main(*sys.argv[1:4])

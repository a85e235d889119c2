"""A job whose Python worker kills Spark's Python worker daemon and every
worker it forked, as an out-of-memory group kill would, for the test that
such a failure ends a command in one line (its own process: the session it
breaks is its own)."""

from __future__ import annotations

import argparse
import os
import signal

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli
from runners.spark import SparkRunner


class KillWorkerDaemon(beam.DoFn):
    """On element 3, SIGKILLs the process group of this worker's parent,
    Spark's daemon, which forked it: every later attempt finds no daemon."""

    def process(self, element: int):
        if element == 3:
            os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        yield element


def run() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint_dir")
    args = parser.parse_args()
    flags = ["--streaming", f"--checkpoint_dir={args.checkpoint_dir}"]
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(flags if args.checkpoint_dir else []),
    )
    _ = (
        pipeline
        | beam.Create(range(10))
        | beam.Reshuffle()
        | beam.ParDo(KillWorkerDaemon())
    )
    pipeline.run().wait_until_finish()
    return 0


if __name__ == "__main__":
    cli.main(run, "daemon_kill_job")

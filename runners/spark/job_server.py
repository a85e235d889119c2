"""A Beam Job API server that runs submitted pipelines on SparkRunner.

    python -m runners.spark.job_server --job_port 8099 --spark_master_url local[2]

Then any Python Beam job can use ``--runner=PortableRunner
--job_endpoint=localhost:8099``. The server is Beam's in-process job service
(job API, artifact staging, state and message streams) with the runner
swapped: jobs run on one SparkSession, created at start-up from the server's
flags and shared by all jobs. The SDK environment a client asks for is not
started; stages run in Beam's SDK harness inside Spark's Python workers, so
submitted code must be importable there (same interpreter and packages).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading

from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.portability import local_job_service

from runners.spark.options import SparkOptions, check_options
from runners.spark.runner import SparkRunner
from runners.spark.session import get_or_create_session

_LOGGER = logging.getLogger(__name__)


class SparkBeamJob(local_job_service.BeamJob):
    """One submitted pipeline, run by SparkRunner on the server's session."""

    def _invoke_runner(self):
        self.set_state(beam_job_api_pb2.JobState.RUNNING)
        return SparkRunner().run_portable_pipeline(
            self._pipeline_proto, self.pipeline_options()
        )


class SparkJobServicer(local_job_service.LocalJobServicer):
    """Beam's job servicer whose jobs are :class:`SparkBeamJob`."""

    def __init__(self, staging_dir: str | None = None) -> None:
        super().__init__(staging_dir, beam_job_type=SparkBeamJob)


def serve(job_port: int, spark_options: SparkOptions) -> tuple[SparkJobServicer, int]:
    """Creates the SparkSession and starts the server; returns it and its port."""
    get_or_create_session(spark_options)
    servicer = SparkJobServicer()
    port = servicer.start_grpc_server(job_port)
    return servicer, port


def main(argv: list[str] | None = None) -> None:
    """Serves until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m runners.spark.job_server",
        description="Beam Job API server on Spark",
        epilog="The SparkRunner's options are taken too and set up the "
        "server's Spark: --spark_master_url URL (default local[*,4]), "
        "--spark_conf KEY=VALUE (repeatable), --spark_default_parallelism N "
        "(docs/spark-runner.md, 'Options').",
    )
    parser.add_argument(
        "--job_port", type=int, default=8099, help="the Job API's port (0: any free)"
    )
    args, spark_args = parser.parse_known_args(argv)
    spark_options = SparkOptions(spark_args)
    try:
        check_options(spark_options)
    except ValueError as error:  # one line, before Spark starts
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    logging.basicConfig(level=logging.INFO)
    servicer, port = serve(args.job_port, spark_options)
    print(f"Job service listening on localhost:{port}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    servicer.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

"""Spark's Python worker daemon, with Beam's SDK harness imported up front.

Spark forks every Python worker from this daemon
(``spark.python.daemon.module``). Importing Beam takes seconds; doing it once
here, before the fork, spares each new worker that cost.
"""

# Imported for their side effect: loaded modules are inherited by forks.
import apache_beam.runners.portability.fn_api_runner.worker_handlers  # noqa: F401
import apache_beam.runners.worker.bundle_processor  # noqa: F401
from pyspark import daemon

import runners.spark.stage_executor  # noqa: F401

if __name__ == "__main__":
    daemon.manager()

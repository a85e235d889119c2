"""Spark's Python worker daemon, with Beam's SDK harness imported up front.

Spark forks every Python worker from this daemon
(``spark.python.daemon.module``). Importing Beam takes seconds; doing it once
here, before the fork, spares each new worker that cost.

A reused worker runs a full ``gc.collect()`` after every task, and a full
collection walks every tracked object, Beam's and the SDK's hundreds of
thousands included: that took about 0.2 CPU-seconds per task, most of a
small task's cost. ``gc.freeze()`` moves the objects the daemon holds at the
fork (modules, classes, protobuf descriptors) to a permanent generation that
collections skip; objects the workers create are still collected.
"""

import gc

# Imported for their side effect: loaded modules are inherited by forks.
import apache_beam.runners.portability.fn_api_runner.worker_handlers  # noqa: F401
import apache_beam.runners.worker.bundle_processor  # noqa: F401

# The module each fork runs. PySpark imports it from pyspark.zip, which
# holds no bytecode, so every new worker compiled it again: 70 ms each.
import pyspark.worker  # noqa: F401
from pyspark import daemon

import runners.spark.stage_executor  # noqa: F401

if __name__ == "__main__":
    gc.freeze()
    daemon.manager()

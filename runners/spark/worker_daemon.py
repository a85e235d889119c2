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

A new worker's first task also re-read the index of every zip archive on the
import path, about 90 ms; the daemon trims the import caches so that it
does not (``_lighten_import_caches``).

When the JVM closes a worker's socket (the session stopping at the end of a
job, or a killed task), PySpark's daemon let the worker's last flush raise
``BrokenPipeError`` and printed its traceback on the job's stderr, after a
job that had succeeded. The daemon here ends such a worker quietly
(``quiet_when_the_jvm_hangs_up``); any other error is still raised.
"""

import gc
import sys
import zipfile
import zipimport
from collections.abc import Callable

# Imported for their side effect: loaded modules are inherited by forks.
import apache_beam.runners.portability.fn_api_runner.worker_handlers  # noqa: F401
import apache_beam.runners.worker.bundle_processor  # noqa: F401

# The module each fork runs. PySpark imports it from pyspark.zip, which
# holds no bytecode, so every new worker compiled it again: 70 ms each.
import pyspark.worker  # noqa: F401
from pyspark import daemon

import runners.spark.stage_executor  # noqa: F401


def java_archives_without_python(path: list[str]) -> list[str]:
    """The entries of ``path`` that are jars holding no Python modules.

    A jar that cannot be read is kept: it is not this daemon's to judge.
    """
    found = []
    for entry in path:
        if not entry.endswith(".jar"):
            continue
        try:
            with zipfile.ZipFile(entry) as jar:
                names = jar.namelist()
        except (OSError, zipfile.BadZipFile):
            continue
        if not any(name.endswith((".py", ".pyc")) for name in names):
            found.append(entry)
    return found


def _lighten_import_caches() -> None:
    # Each new worker's first task calls importlib.invalidate_caches (Spark
    # has put its files directory on the path), and every cached zip
    # importer then re-reads its archive's index: one importer per package
    # imported from pyspark.zip, and two under Spark's core jar, which is on
    # the path with 6,000 classes and no Python. That took 90 ms a worker.
    # A zip importer made later reuses zipimport's own parsed index.
    for entry in java_archives_without_python(sys.path):
        sys.path.remove(entry)
    for key, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[key]


# What ends a worker whose socket the JVM has closed.
_HUNG_UP = (BrokenPipeError, ConnectionResetError)
# A worker's return code that makes PySpark's daemon end it.
_END_WORKER = 1


def quiet_when_the_jvm_hangs_up(worker: Callable[..., int]) -> Callable[..., int]:
    """``worker`` (PySpark's ``daemon.worker``), ending the worker with no
    traceback when its socket was closed on the JVM's side."""

    def serve(*args, **kwargs) -> int:
        try:
            return worker(*args, **kwargs)
        except _HUNG_UP:
            # Nothing to report: the JVM that would read it is gone, or has
            # given up on this task.
            return _END_WORKER

    return serve


if __name__ == "__main__":
    daemon.worker = quiet_when_the_jvm_hangs_up(daemon.worker)
    _lighten_import_caches()
    gc.freeze()
    daemon.manager()

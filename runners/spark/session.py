"""Obtaining the SparkSession a pipeline runs on.

An active session is reused as it is (its master and configuration win), so a
test suite or a notebook can share one. Otherwise a session is created from
the pipeline options.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from runners.spark.options import SparkOptions, master_url, parse_spark_conf

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

_LOGGER = logging.getLogger(__name__)

# Top-level packages of this project that user pipelines import on executors.
_PROJECT_PACKAGES = ("runners", "transforms", "pipelines", "testing")

_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_APP_NAME = "millwheel-beam"

# Settings that keep a local or test session light; user --spark_conf wins.
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.python.worker.reuse": "true",
    # Each PythonRDD a task runs is a round trip between the JVM and a Python
    # worker. Over local TCP (no TCP_NODELAY on either side) each one stalled
    # about 40 ms on delayed acknowledgements, whatever its size: a Zeitgeist
    # micro-batch, a dozen such hops, took 1.2 s; over Unix sockets, 0.25 s.
    "spark.python.unix.domain.socket.enabled": "true",
}


def ensure_python_env() -> None:
    """Makes Spark's Python workers run this interpreter.

    Without PYSPARK_PYTHON, workers start the system ``python3``, which lacks
    apache_beam (checked on this machine).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _driver_python_path() -> str:
    # Functions of a test or user module are pickled by reference; executors
    # must be able to import that module, so they get the driver's sys.path.
    return os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))


def get_or_create_session(options: SparkOptions) -> SparkSession:
    """Returns the active SparkSession, or a new one built from ``options``."""
    ensure_python_env()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    # getActiveSession is per thread; a context started elsewhere in this
    # process is reused too (there can be only one).
    if active is None and SparkContext._active_spark_context is not None:
        active = SparkSession.builder.getOrCreate()
    if active is not None:
        wanted = options.get_all_options(drop_default=True).get("spark_master_url")
        if wanted and wanted != active.sparkContext.master:
            _LOGGER.warning(
                "Reusing the active SparkSession on %s; --spark_master_url=%s "
                "and --spark_conf apply only when the runner creates the session.",
                active.sparkContext.master,
                wanted,
            )
        return active
    master = master_url(options)
    builder = SparkSession.builder.master(master).appName(_APP_NAME)
    conf = dict(_DEFAULT_CONF)
    if master.startswith("local"):
        # Forked workers inherit an already imported Beam SDK harness. Only
        # locally: a remote worker imports the daemon before any shipped code.
        conf["spark.python.daemon.module"] = "runners.spark.worker_daemon"
    conf["spark.executorEnv.PYTHONPATH"] = _driver_python_path()
    conf["spark.executorEnv.PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    if options.spark_default_parallelism:
        conf["spark.default.parallelism"] = str(options.spark_default_parallelism)
    conf.update(parse_spark_conf(options.spark_conf))
    # The driver's JVM maps the class archive if one was built: half its
    # start. (Imported here: `python -m runners.spark.class_archive` must
    # not find the module loaded already by this package.)
    from runners.spark.class_archive import with_class_archive

    driver_options = with_class_archive(conf.get(_DRIVER_JAVA_OPTIONS, ""))
    if driver_options:
        conf[_DRIVER_JAVA_OPTIONS] = driver_options
    for key, value in conf.items():
        builder = builder.config(key, value)
    _launch_driver_jvm({**conf, "spark.master": master, "spark.app.name": _APP_NAME})
    session = builder.getOrCreate()
    _quiet_accumulator_server(session.sparkContext)
    if master.startswith("spark://"):
        ship_project_code(session.sparkContext)
    return session


def _launch_driver_jvm(conf: dict[str, str]) -> None:
    """Starts the driver's JVM (PySpark's gateway) in a session of its own,
    unless one runs already.

    A stop sent to the job's whole process group, as `timeout`, a shell's
    job control or systemd send SIGTERM, must reach the Python driver alone:
    it stops the job after the running batch commits, then stops Spark. A
    JVM in the group died at once, with its Python workers, and the stop
    ended in a Py4J traceback. The
    JVM still ends with the driver: it exits when the pipe from the driver
    closes, however the driver ends.
    """
    from pyspark import SparkConf, SparkContext, java_gateway

    if SparkContext._gateway is not None:
        return
    spark_conf = SparkConf(loadDefaults=False).setAll(conf.items())
    # PySpark starts the JVM with a `preexec_fn` (to ignore SIGINT), so
    # Python fork()s, and a fork runs every fork handler of the process in
    # the child. gRPC's, since grpcio 1.80, can crash that child before it
    # runs java when the process holds channels, as the Photon command holds
    # Bigtable's (grpc/grpc#43055): "Java gateway process exited before
    # sending its port number". Without it Python makes the child with
    # vfork(), which runs none; the JVM's own session already keeps a
    # terminal's Ctrl-C from it.
    popen, java_gateway.Popen = java_gateway.Popen, _popen_without_preexec
    try:
        gateway = java_gateway.launch_gateway(
            spark_conf, popen_kwargs={"start_new_session": True}
        )
    finally:
        java_gateway.Popen = popen
    SparkContext._ensure_initialized(gateway=gateway)


def _popen_without_preexec(args: list[str], **kwargs) -> subprocess.Popen:
    kwargs.pop("preexec_fn", None)
    return subprocess.Popen(args, **kwargs)


def _quiet_accumulator_server(spark_context: SparkContext) -> None:
    """One warning line, not a traceback, when the JVM's accumulator
    connection breaks.

    The driver JVM keeps one connection open to PySpark's accumulator
    server. When the JVM dies, the server's handler reads EOF and
    ``socketserver`` prints that traceback to stderr, ahead of the job's
    own error (`SparkDriverLost`), which says what happened.
    """
    server = getattr(spark_context, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(request, client_address) -> None:
        _LOGGER.warning(
            "SparkRunner: the driver JVM's accumulator connection broke (%s)",
            sys.exc_info()[0].__name__,
        )

    server.handle_error = handle_error


def ship_project_code(spark_context: SparkContext) -> None:
    """Adds this project's packages to the executors' Python path.

    On a remote standalone cluster the workers do not have the project
    installed; a zip of its top-level packages travels with the job.
    """
    root = Path(__file__).resolve().parents[2]
    staging = Path(tempfile.mkdtemp(prefix="millwheel-code-"))
    archive = staging / "millwheel_project.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for package in _PROJECT_PACKAGES:
            base = root / package
            if not (base / "__init__.py").exists():
                continue
            for path in base.rglob("*.py"):
                zf.write(path, path.relative_to(root).as_posix())
    spark_context.addPyFile(str(archive))
    # Spark serves the file from this path for the session's lifetime.
    atexit.register(shutil.rmtree, staging, True)

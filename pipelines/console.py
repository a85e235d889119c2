"""Console logging for the pipeline commands."""

import logging
import os

from runners.spark.errors import quiet_beam_reraise_logs


def configure_logging() -> None:
    """Our progress at INFO; Beam's and the clients' chatter only from WARNING.

    Beam logs type-hint conversions and runner choices at INFO, which buries
    the job's own progress lines.
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("apache_beam", "py4j", "google"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_py4j_resends)
    quiet_beam_reraise_logs()


def _not_py4j_resends(record: logging.LogRecord) -> bool:
    # Py4J logs each failed send to Spark's JVM on the root logger, with a
    # traceback, so the `py4j` logger's level does not reach it. The failure
    # that matters reaches the job as an exception (a dead JVM as one line,
    # `SparkDriverLost`); a resend that worked needs no line at all.
    from_py4j = f"{os.sep}py4j{os.sep}" in record.pathname
    return not (from_py4j and record.name == "root")

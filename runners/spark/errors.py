"""Surfacing failures from Spark on the driver, in Python terms.

An executor wraps a failed bundle's SDK error in :class:`StageFailure`, whose
text carries a marked, base64-encoded record (exception type, message,
transform, stage, traceback). Spark relays it inside a Py4J/JVM error; the
driver finds the record and raises :class:`PipelineError` with the Python
story first, instead of a JVM stack.

When the driver's own JVM dies (killed, out of memory), every Py4J call
after fails with a connection error; :func:`driver_lost` turns that into
:class:`SparkDriverLost`, one line that says so. When Spark gives up on a
task for a reason outside the pipeline's code (its Python worker daemon
killed, say), :func:`job_aborted` makes it one :class:`SparkJobAborted`.
"""

from __future__ import annotations

import base64
import builtins
import json
import logging
import re
import signal
import subprocess

# How long a JVM whose connection broke is given to be seen to exit.
_EXIT_GRACE_SECONDS = 5.0
_BEGIN, _END = "<<millwheel-stage-error:", ":millwheel-stage-error>>"
_RECORD = re.compile(re.escape(_BEGIN) + r"([A-Za-z0-9+/=]+)" + re.escape(_END))
_LAST_LINE = re.compile(r"^([A-Za-z_][\w.]*): ?(.*)$")
_TRANSFORM = re.compile(r"\[while running '(.+?)'\]")
# Frames of the harness, Spark and this runner, not of the user's code.
_INTERNAL = re.compile(
    r'File "(?:[^"]*/)?(?:apache_beam|pyspark|runners/spark)/|<frozen '
)


class StageFailure(RuntimeError):
    """Raised on an executor when a bundle of a stage fails."""

    def __init__(self, stage: str, sdk_error: str) -> None:
        record = summarize(stage, sdk_error)
        encoded = base64.b64encode(json.dumps(record).encode()).decode()
        super().__init__(f"{format_record(record)}\n{_BEGIN}{encoded}{_END}")


class PipelineError(RuntimeError):
    """A user DoFn failed; the message leads with its Python exception."""

    def __init__(self, record: dict) -> None:
        super().__init__(format_record(record))
        self.exception_type: str = record["type"]
        self.exception_message: str = record["message"]
        self.transform: str | None = record["transform"]
        self.stage: str = record["stage"]
        self.worker_traceback: str = record["traceback"]


def summarize(stage: str, sdk_error: str) -> dict:
    """Extracts type, message, transform and user frames from an SDK error."""
    lines = [line for line in sdk_error.rstrip().splitlines() if line.strip()]
    exc_type, message = "Exception", lines[-1] if lines else sdk_error
    for line in reversed(lines):
        match = _LAST_LINE.match(line)
        if match and not line.startswith(" "):
            exc_type, message = match.group(1), match.group(2)
            break
    transforms = _TRANSFORM.findall(sdk_error)
    return {
        "type": exc_type,
        "message": message,
        "transform": transforms[-1] if transforms else None,
        "stage": stage,
        "user_frames": _user_frames(lines),
        "traceback": sdk_error,
    }


def _user_frames(lines: list[str]) -> list[str]:
    # The last traceback of a chain is the one the harness re-raised; it ends
    # in the user's frames.
    starts = [ix for ix, line in enumerate(lines) if line.startswith("Traceback")]
    lines = lines[starts[-1] :] if starts else lines
    frames = []
    for ix, line in enumerate(lines):
        stripped = line.strip()
        internal = bool(_INTERNAL.search(line)) and "_test.py" not in line
        if stripped.startswith('File "') and not internal:
            frames.append(stripped)
            following = lines[ix + 1].strip() if ix + 1 < len(lines) else ""
            if following and not following.startswith("File "):
                frames.append("  " + following)
    return frames[-20:]


def format_record(record: dict) -> str:
    """The human-readable error: exception first, then where, then frames."""
    text = [f"{record['type']}: {record['message']}"]
    if record["transform"]:
        text.append(f"  in transform '{record['transform']}' ({record['stage']})")
    else:
        text.append(f"  in {record['stage']}")
    if record["user_frames"]:
        text.append("User code traceback (most recent call last):")
        text.extend("  " + frame for frame in record["user_frames"])
    return "\n".join(text)


def _error_class(type_name: str) -> type[PipelineError]:
    # A builtin exception type (ValueError, KeyError, ...) is mixed in so that
    # `except ValueError` around pipeline.run() works as it would locally.
    base = getattr(builtins, type_name.rsplit(".", 1)[-1], None)
    if isinstance(base, type) and issubclass(base, Exception):
        try:
            return type(type_name, (PipelineError, base), {})
        except TypeError:
            pass
    return PipelineError


def from_spark_exception(exc: BaseException) -> PipelineError | None:
    """The PipelineError hidden in a Spark/Py4J exception, if there is one."""
    match = _RECORD.search(str(exc))
    if match is None:
        return None
    record = json.loads(base64.b64decode(match.group(1)))
    error = _error_class(record["type"])(record)
    # The original SDK traceback stays reachable for debugging.
    error.add_note("Worker traceback:\n" + record["traceback"])
    return error


class SparkDriverLost(RuntimeError):
    """Spark's driver JVM, which PySpark talks to through Py4J, is gone."""


def driver_lost(
    spark_context, exc: BaseException, outcome: str
) -> SparkDriverLost | None:
    """A :class:`SparkDriverLost` if ``exc`` came from a dead driver JVM,
    its message ending in ``outcome``: what became of the job's work.

    A JVM that PySpark launched is judged by its process (PySpark keeps its
    ``Popen``); one it did not launch by the error alone: a Py4J error that
    is not a Java exception, or a broken connection, somewhere in its chain.
    """
    broken = any(_from_the_connection(e) for e in _chain(exc))
    process = getattr(getattr(spark_context, "_gateway", None), "proc", None)
    if process is None:
        status = None
        if not broken:
            return None
    else:
        try:
            # A killed process closes its sockets before it can be reaped:
            # the broken connection can be seen first.
            status = process.wait(timeout=_EXIT_GRACE_SECONDS if broken else 0)
        except subprocess.TimeoutExpired:
            return None
    return SparkDriverLost(f"Spark's driver JVM {_how_it_ended(status)}; {outcome}")


class SparkJobAborted(RuntimeError):
    """Spark gave up on a task that failed as often as it allows, for a
    reason outside the pipeline's code: a Python worker that died, or
    Spark's Python worker daemon killed with its workers."""


# Spark's own summary, then the last attempt's error, first line.
_ABORTED = re.compile(
    r"Job aborted due to stage failure: (?P<what>.+?), most recent failure: "
    r"Lost task .*?\): (?:org\.apache\.spark\.SparkException: )?(?P<last>[^\n]+)"
)
# Spark's advice on its UDF fault handler ends the crash line: not for Beam.
_ADVICE = re.compile(r"\s*Consider setting .*$")
# How an attempt ends when Spark's Python workers, or their daemon, died:
# the worker's stream ends, or the daemon's is closed to a new request.
_WORKERS_DIED = re.compile(r"Python worker exited unexpectedly|Stream closed")


def job_aborted(exc: BaseException, outcome: str) -> SparkJobAborted | None:
    """A :class:`SparkJobAborted` if Spark aborted the job in ``exc``'s
    chain, its message ending in ``outcome``: instead of a Py4J traceback
    and a JVM stack, what failed and how the last attempt ended. (A failure
    of the pipeline's own code is `from_spark_exception`'s.)"""
    from py4j.protocol import Py4JJavaError

    for error in _chain(exc):
        if not isinstance(error, Py4JJavaError):
            continue
        match = _ABORTED.search(str(error))
        if match is None:
            continue
        last = _ADVICE.sub("", match.group("last")).strip()[:300]
        cause = " (its Python workers died: killed, or out of memory?)"
        if not _WORKERS_DIED.search(last):
            cause = ""
        return SparkJobAborted(
            f"Spark aborted the job: {match.group('what')}, the last with "
            f"{last!r}{cause}; {outcome}"
        )
    return None


def _from_the_connection(error: BaseException) -> bool:
    # Py4J reports a failed send in more than one way: a network error, or,
    # where a reply was expected, a Py4JError such as "PythonRDD does not
    # exist in the JVM". A Py4JJavaError is the JVM answering.
    from py4j.protocol import Py4JError, Py4JJavaError

    if isinstance(error, Py4JJavaError):
        return False
    return isinstance(error, (Py4JError, ConnectionError))


def _how_it_ended(status: int | None) -> str:
    if status is None:
        return "stopped answering"
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


# Beam's DoFn runner logs a failing step's exception, traceback and all,
# just before it raises that same exception (`_reraise_augmented`, the one
# log with an exception of its module, compiled, so the record cannot name
# the function); the runner and the commands report what is raised (one
# line for a job error, the traceback for a bug), so the log only says it
# twice, and before that one line.
_BEAM_DOFN_RUNNER = "apache_beam.runners.common"


def _not_beam_reraise(record: logging.LogRecord) -> bool:
    return not (record.name == _BEAM_DOFN_RUNNER and record.exc_info)


def quiet_beam_reraise_logs() -> None:
    """Drops Beam's log of an exception it is about to raise again, in this
    process (a command's driver, or a Spark worker running Beam's steps)."""
    logger = logging.getLogger(_BEAM_DOFN_RUNNER)
    if _not_beam_reraise not in logger.filters:
        logger.addFilter(_not_beam_reraise)

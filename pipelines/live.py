"""Running a pipeline command live: until the input ends or the user stops it.

A streaming job over inputs that never end runs until SIGINT (Ctrl-C) or
SIGTERM. The first of these asks the runner to stop after the batch it is
running has committed, so a restart on the same `--checkpoint_dir` resumes
exactly there; the command then prints its summary as usual. A second
Ctrl-C while stopping interrupts at once (the checkpoint still holds: the
batch in flight is replayed on restart).

While the job runs, a status line every `status_seconds` says how far it
has got, from the metrics of its committed batches.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from apache_beam import Pipeline
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult, PipelineState
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

from pipelines.cli import UsageError
from pipelines.outputs import EarlierOutputs
from pipelines.runner_choice import is_beam_direct, is_beam_local
from pipelines.summary import counter_totals

_log = logging.getLogger("pipelines.live")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_POLL_MS = 200
# The counter every reader adds its records to ("namespace/name").
RECORDS_READ = "millwheel.records/records_read"


@contextlib.contextmanager
def _stop_requests() -> Iterator[tuple[threading.Event, Callable[[], None]]]:
    """An event set by the first SIGINT or SIGTERM while in the block, and
    a function that takes the signals back for it."""
    requested = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        _log.info(
            "%s: stopping after the running batch commits (Ctrl-C again to "
            "interrupt at once)",
            signal.Signals(signum).name,
        )
        requested.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def take_signals() -> None:
        if not requested.is_set():
            for s in _STOP_SIGNALS:
                signal.signal(s, request_stop)

    previous = {s: signal.getsignal(s) for s in _STOP_SIGNALS}
    take_signals()
    try:
        yield requested, take_signals
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def require_streaming_runner(
    options: PipelineOptions, follow: bool, live_generated: bool
) -> None:
    """Raises `UsageError` for one of Beam's runners that cannot run this
    job in streaming: none of its local runners runs a job that follows
    directories (`--follow`, or the live generator's, which `--streaming`
    with no input plays into), and its DirectRunner none of the pipelines'
    streaming jobs (docs/streaming.md, 'Not yet')."""
    standard = options.view_as(StandardOptions)
    name = standard.runner
    # Beam's local runners: the bundle-based one fails to expand a splittable
    # DoFn in streaming ("GroupByKey ... was not replaced as expected"), and
    # the FnApiRunner it otherwise picks runs a job to its end inside `run()`.
    if (follow or live_generated) and is_beam_local(name):
        given = "--follow" if follow else "--streaming with no input"
        raise UsageError(
            f"{given} needs a runner that runs unbounded splittable DoFns live, "
            f"such as --runner=SparkRunner; Beam's {name or 'DirectRunner'} "
            "cannot follow a directory"
        )
    # For these pipelines in streaming it picks its bundle-based runner,
    # which fails on files too: Zeitgeist's GroupByKeys "not replaced as
    # expected", Photon's result that cannot be waited on for a while.
    if standard.streaming and is_beam_direct(name):
        raise UsageError(
            "--streaming needs a runner that runs it, such as "
            f"--runner=SparkRunner; Beam's {name or 'DirectRunner'} cannot "
            "(leave out --streaming to read the files in batch)"
        )


def resumes(options: PipelineOptions) -> bool:
    """Whether the job resumes a checkpoint: `--checkpoint_dir` names a
    directory that a run has already written to. A live generator then goes
    on beside what the job has read, rather than starting again."""
    from runners.spark.options import SparkOptions

    checkpoint = options.view_as(SparkOptions).checkpoint_dir
    return bool(checkpoint) and any(pathlib.Path(checkpoint).glob("*"))


def earlier_outputs(resume: bool, generated: bool) -> EarlierOutputs:
    """What a live run does with an earlier run's outputs in its directory."""
    if resume:
        return EarlierOutputs.ADD_TO
    return EarlierOutputs.REPLACE if generated else EarlierOutputs.REFUSE


def generator_run(directories: Sequence[pathlib.Path], resume: bool) -> int:
    """The number of a live generator's run into `directories`, which offsets
    its seed and ids: for a job that resumes, the next file number there, so
    no two runs that played a file share it; 0 for a job that starts afresh,
    which would read an earlier run's files as input, so they are deleted."""
    from testing.live_player import clear_played, next_file_number

    if resume:
        return max(next_file_number(d) for d in directories)
    if cleared := sum(clear_played(d) for d in directories):
        _log.info("deleted %d generated files of an earlier run", cleared)
    return 0


def run_until_stopped(
    start: Callable[[], PipelineResult],
    status: Callable[[PipelineResult], str],
    status_seconds: float,
    stop_when: threading.Event | None = None,
) -> PipelineResult:
    """Starts a job with `start` (e.g. `pipeline.run`) and waits for it to
    end, or stops it on SIGINT/SIGTERM, even one that came while it was
    starting, or once `stop_when` is set; logs `status(result)` every
    `status_seconds` (0: never). Returns the job's result, CANCELLED after
    a stop."""
    next_status = time.monotonic() + status_seconds
    with _stop_requests() as (stop, take_signals):
        result = start()
        # A SparkContext created by `start` takes SIGINT for itself, to
        # cancel every Spark job at once: a stop must let the batch commit.
        take_signals()
        while True:
            state = result.wait_until_finish(duration=_POLL_MS)
            if PipelineState.is_terminal(state):
                return result
            if stop.is_set() or (stop_when is not None and stop_when.is_set()):
                result.cancel()
                return result
            if status_seconds and time.monotonic() >= next_status:
                _log.info("%s", status(result))
                next_status += status_seconds


def run_job(
    pipeline: Pipeline,
    streaming: bool,
    status_line: Callable[[dict[str, int], str, str], str],
    namespaces: tuple[str, ...],
    status_seconds: float,
    stop_when: threading.Event | None = None,
) -> PipelineResult:
    """Runs a command's `pipeline`: a batch job to its end; a streaming one
    until it ends or is stopped (`run_until_stopped`, `stop_when`), logging
    `status_line(totals, rate, watermark)` from the committed counters of
    `namespaces`, `read_rate`'s text and the watermark's."""
    if not streaming:
        result = pipeline.run()
        result.wait_until_finish()
        return result
    # The counters of a resumed job include its earlier runs' records: the
    # rate is taken between two status lines, never over the whole total.
    previous: list[tuple[float, int]] = []

    def status(result: PipelineResult) -> str:
        totals = counter_totals(result, namespaces)
        now, records = time.monotonic(), totals.get(RECORDS_READ, 0)
        rate = read_rate(previous[0], (now, records)) if previous else ""
        previous[:] = [(now, records)]
        return status_line(totals, rate, watermark_lag(result))

    return run_until_stopped(pipeline.run, status, status_seconds, stop_when)


def read_rate(earlier: tuple[float, int], later: tuple[float, int]) -> str:
    """ " (N/s)": records read per second between two (time, records read)."""
    elapsed = later[0] - earlier[0]
    return f" ({(later[1] - earlier[1]) / max(elapsed, 1e-9):.0f}/s)"


def watermark_lag(result: PipelineResult) -> str:
    """ ", watermark T (lag S s)" for a runner that reports its watermark
    (this project's SparkRunner in streaming), else ""."""
    watermark = getattr(result, "watermark", lambda: None)()
    if watermark is None or watermark <= MIN_TIMESTAMP or watermark >= MAX_TIMESTAMP:
        return ""
    lag = time.time() - watermark.micros / 1e6
    return f", watermark {watermark.to_rfc3339()} (lag {lag:.1f} s)"

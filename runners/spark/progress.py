"""Progress of a running pipeline in the log, for runs that take minutes.

Sessions this runner creates have Spark's console progress bar off: it
redraws one line and mixes badly with log output. Instead a daemon thread
polls Spark's status tracker and logs, every ``--spark_progress_seconds``,
how long the pipeline has run and how many tasks of the running Spark
stages are done. The translator logs what the driver is doing between jobs
(collecting side inputs, running the stages).

A streaming job commits several micro-batches a second, too many for a
line each at INFO: :class:`BatchProgress` sums them up every
``--spark_progress_seconds`` instead, and each batch's own line is DEBUG.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

_LOGGER = logging.getLogger(__name__)


class ProgressLog:
    """Logs the running stages' task counts every ``every_s`` seconds
    (0: never) while the ``with`` block runs."""

    def __init__(self, spark_context: Any, every_s: float) -> None:
        self._tracker = spark_context.statusTracker()
        self._every_s = every_s
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="spark-runner-progress", daemon=True
        )

    def __enter__(self) -> ProgressLog:
        if self._every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            _LOGGER.info("%s", self.describe())

    def describe(self) -> str:
        """One line: elapsed time and the running stages' finished tasks."""
        elapsed = time.monotonic() - self._started
        infos = map(self._tracker.getStageInfo, self._tracker.getActiveStageIds())
        stages = [info for info in infos if info is not None]
        if not stages:
            return f"SparkRunner: {elapsed:.0f} s, no Spark stage running"
        done = sum(s.numCompletedTasks for s in stages)
        total = sum(s.numTasks for s in stages)
        running = sum(s.numActiveTasks for s in stages)
        return (
            f"SparkRunner: {elapsed:.0f} s, {len(stages)} Spark stage(s) running, "
            f"tasks {done}/{total} done, {running} running"
        )


class BatchProgress:
    """Streaming: one INFO line every ``every_s`` seconds (0: never) on the
    micro-batches committed since the last one."""

    def __init__(
        self, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._every_s = every_s
        self._clock = clock
        self._since = clock()
        self._seconds: list[float] = []

    def committed(
        self, batch: int, seconds: float, watermark: str, oldest_timer: str
    ) -> None:
        """Notes batch ``batch``, committed after running ``seconds``; logs
        the summary when it is due, with the watermark and the oldest
        pending timer as of this batch."""
        self._seconds.append(seconds)
        now = self._clock()
        if self._every_s <= 0 or now - self._since < self._every_s:
            return
        _LOGGER.info(
            "SparkRunner streaming: %d batch(es) committed in the last %.0f s, "
            "up to batch %d; median %.2f s, slowest %.2f s; output watermark "
            "%s, oldest pending timer %s",
            len(self._seconds),
            now - self._since,
            batch,
            statistics.median(self._seconds),
            max(self._seconds),
            watermark,
            oldest_timer,
        )
        self._since, self._seconds = now, []

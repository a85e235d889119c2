"""The result of a streaming run: it runs the job's driver loop in a
background thread, so ``run()`` returns at once."""

from __future__ import annotations

import threading

from apache_beam.runners import runner
from apache_beam.utils.timestamp import Timestamp

from runners.spark.metrics import SparkMetrics
from runners.spark.streaming_job import StreamingJob


class StreamingPipelineResult(runner.PipelineResult):
    """A running streaming job: wait for it, cancel it, read its metrics."""

    def __init__(self, job: StreamingJob) -> None:
        super().__init__(runner.PipelineState.RUNNING)
        self._job = job
        self._thread = threading.Thread(
            target=job.run, name="spark-streaming-driver", daemon=True
        )
        self._thread.start()

    @property
    def state(self) -> str:
        return self._job.state

    def wait_until_finish(self, duration=None) -> str:
        """Blocks until the job ends, or for ``duration`` milliseconds."""
        self._thread.join(None if duration is None else duration / 1000)
        if self._job.error is not None:
            raise self._job.error
        return self._job.state

    def cancel(self) -> str:
        """Stops after the running batch commits; returns the final state."""
        self._job.stop()
        return self.wait_until_finish()

    def drain(self) -> str:
        """Stops reading unbounded sources after the running batch, finishes
        bounded ones, fires every remaining event-time timer and pane (the
        watermark goes to +inf), and waits for the job to end: DONE."""
        self._job.drain()
        return self.wait_until_finish()

    def metrics(self) -> SparkMetrics:
        """User metrics of the committed batches (a replay counts once)."""
        return SparkMetrics(self._job.position.metrics)

    def watermark(self) -> Timestamp | None:
        """The lowest watermark of the job's PCollections in its last
        committed batch: how far in event time everything has got. None
        before the first commit."""
        watermarks = self._job.position.watermarks.values()
        if not watermarks:
            return None
        return Timestamp(micros=min(watermarks))

    @property
    def checkpoint_dir(self) -> str:
        """Where the job's checkpoints are."""
        return str(self._job.checkpoint.root)

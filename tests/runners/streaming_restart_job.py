"""A streaming job with keyed state, event-time timers and a file sink, for
the kill-and-restart tests (run as its own process, so it can be killed).

Per key and 10 s window it sums the values in state and emits the window's
total from an event-time timer; totals go through a reshuffle to Beam's
``fileio.WriteToFiles``, one file per window. ``--pause_at`` makes a place
of the user code announce itself (a marker file) and sleep, so that the
test's SIGKILL lands there: ``process`` (an element being processed),
``timer`` (a timer callback), ``sink`` (a stage after the keyed stage's
tasks have committed their state, before the batch is committed), or
``task`` (the Python worker kills itself once, for Spark to retry the task,
and the job goes on). Places are comma-separated: ``task,sink`` retries a
task of step 3, then pauses in the sink after step 3's batch is committed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from runners.spark import SparkRunner

KEYS = ("k0", "k1", "k2", "k3")
STEPS = 6
WINDOW = 10


def script() -> TestStream:
    """Elements of window ``i`` in step ``i``, then the watermark to its end."""
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements(
            [
                TimestampedValue((key, step * 100 + ix), step * WINDOW + ix)
                for ix, key in enumerate(KEYS * 2)
            ]
        ).advance_watermark_to(step * WINDOW + WINDOW)
    return stream.advance_watermark_to_infinity()


def pause(markers: str, place: str) -> None:
    """Announces ``place`` and waits there for the test's SIGKILL."""
    Path(markers, place).touch()
    time.sleep(120)


class WindowTotals(beam.DoFn):
    """Per key: values of open windows in a bag; a timer per window."""

    VALUES = BagStateSpec("values", VarIntCoder())
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)

    def __init__(self, pause_at: frozenset[str], markers: str) -> None:
        self._pause_at = pause_at
        self._markers = markers

    def process(
        self,
        element,
        ts=beam.DoFn.TimestampParam,
        values=beam.DoFn.StateParam(VALUES),
        window_end=beam.DoFn.TimerParam(WINDOW_END),
    ):
        key, value = element
        if "process" in self._pause_at and value == 401:
            pause(self._markers, "process")
        if "task" in self._pause_at and value == 301:
            marker = Path(self._markers, "task")
            if not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        values.add(value)
        start = int(ts.micros // 1_000_000) // WINDOW * WINDOW
        # The window's last instant: due once the watermark reaches its end.
        last_instant = Timestamp(micros=(start + WINDOW) * 1_000_000 - 1)
        window_end.set(last_instant, dynamic_timer_tag=str(start))

    @on_timer(WINDOW_END)
    def emit(
        self,
        key=beam.DoFn.KeyParam,
        tag=beam.DoFn.DynamicTimerTagParam,
        values=beam.DoFn.StateParam(VALUES),
    ):
        start = int(tag)
        if "timer" in self._pause_at and key == "k2" and start == 50:
            pause(self._markers, "timer")
        mine = [v for v in values.read() if v // 100 == start // WINDOW]
        rest = [v for v in values.read() if v // 100 != start // WINDOW]
        values.clear()
        for v in rest:
            values.add(v)
        yield f"{key},{start},{len(mine)},{sum(mine)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint_dir", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--markers", required=True)
    parser.add_argument("--pause_at", default="")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    pause_at = frozenset(filter(None, args.pause_at.split(",")))
    # The runner's per-batch lines, which the test reads.
    logging.basicConfig(level=logging.INFO)
    options = PipelineOptions(
        [
            "--streaming",
            f"--spark_master_url={args.master}",
            "--spark_default_parallelism=2",
            f"--checkpoint_dir={args.checkpoint_dir}",
        ]
    )

    def sink_hook(line: str) -> str:
        if "sink" in pause_at and line.startswith("k1,30,"):
            pause(args.markers, "sink")
        return line

    with beam.Pipeline(runner=SparkRunner(), options=options) as p:
        (
            p
            | script()
            | beam.ParDo(WindowTotals(pause_at, args.markers))
            | beam.Reshuffle()
            | beam.Map(sink_hook)
            | beam.WindowInto(beam.window.FixedWindows(WINDOW))
            | fileio.WriteToFiles(
                args.output, shards=1, sink=lambda dest: fileio.TextSink()
            )
        )


if __name__ == "__main__":
    main()

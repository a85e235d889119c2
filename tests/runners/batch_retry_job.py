"""A batch job whose Python worker dies once in a stateful stage and once
in a file sink's write, for the task-retry test (its own process, on the
runner's default master)."""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindow

from runners.spark import SparkRunner

KEYS = 20
VALUES_PER_KEY = 50


def die_once(markers: str, place: str) -> None:
    """Kills this worker process the first time ``place`` is reached."""
    marker = Path(markers, place)
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


class RunningTotal(beam.DoFn):
    """Per key: the sum of its values in state; emitted when the input ends."""

    TOTAL = ReadModifyWriteStateSpec("total", VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, markers: str) -> None:
        self._markers = markers

    def process(
        self,
        element,
        total=beam.DoFn.StateParam(TOTAL),
        end=beam.DoFn.TimerParam(END),
    ):
        key, value = element
        if key == "k7" and value == VALUES_PER_KEY // 2:
            die_once(self._markers, "stateful")
        total.write((total.read() or 0) + value)
        end.set(GlobalWindow().max_timestamp())

    @on_timer(END)
    def emit(self, key=beam.DoFn.KeyParam, total=beam.DoFn.StateParam(TOTAL)):
        yield f"{key},{total.read()}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--markers", required=True)
    args = parser.parse_args()

    def in_sink(line: str) -> str:
        if line.startswith("k3,"):
            die_once(args.markers, "sink")
        return line

    options = PipelineOptions(["--spark_default_parallelism=2"])
    with beam.Pipeline(runner=SparkRunner(), options=options) as p:
        (
            p
            | beam.Create(
                [(f"k{k}", v) for k in range(KEYS) for v in range(VALUES_PER_KEY)]
            )
            | beam.ParDo(RunningTotal(args.markers))
            | beam.Reshuffle()
            | beam.Map(in_sink)
            | beam.io.WriteToText(args.output)
        )


if __name__ == "__main__":
    main()

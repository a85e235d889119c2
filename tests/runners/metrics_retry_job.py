"""A job (streaming, or batch) whose Python worker dies once after upstream
stages have counted their elements into cached partitions, for the test
that the counters come out exact (its own process, on the runner's default
master, which retries a failed task).

The left input is counted and split into two outputs (`counted` in
`SplitLeft`: a stage of two outputs, cached in batch too), the right one
counted (`CountRight`); all three are flattened and counted again
(`CountFlattened`), where the worker kills itself the first time it
reaches the element `--die_at`. Prints the counters as JSON by step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import SparkRunner

PER_INPUT = 200


class Count(beam.DoFn):
    """Counts each element in `counted`; with `split`, outputs odd elements
    under the tag "odd"; the worker dies once at `die_at`."""

    def __init__(self, split=False, markers=None, die_at=None):
        self._counted = Metrics.counter("metrics_retry_job", "counted")
        self._split = split
        self._markers, self._die_at = markers, die_at

    def process(self, element: int):
        self._counted.inc()
        if element == self._die_at:
            marker = Path(self._markers, "died")
            if not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        if self._split and element % 2:
            yield beam.pvalue.TaggedOutput("odd", element)
        else:
            yield element


def _counted_input(pipeline, name: str, offset: int):
    # The reshuffle puts the counting in a Spark task, not on the driver.
    return (
        pipeline
        | f"Create{name}" >> beam.Create(range(offset, offset + PER_INPUT))
        | f"Reshuffle{name}" >> beam.Reshuffle()
    )


def run(checkpoint_dir: str | None, markers: str, die_at: int) -> dict[str, int]:
    streaming = ["--streaming", f"--checkpoint_dir={checkpoint_dir}"]
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(streaming if checkpoint_dir else []),
    )
    left = _counted_input(pipeline, "Left", 0) | "SplitLeft" >> beam.ParDo(
        Count(split=True)
    ).with_outputs("odd", main="even")
    right = _counted_input(pipeline, "Right", PER_INPUT) | "CountRight" >> beam.ParDo(
        Count()
    )
    _ = (
        (left.even, left.odd, right)
        | beam.Flatten()
        | "CountFlattened" >> beam.ParDo(Count(markers=markers, die_at=die_at))
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("counted"))["counters"]
    return {c.key.step: c.committed for c in counters}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint_dir", help="streaming; without it, batch")
    parser.add_argument("--markers", required=True)
    parser.add_argument("--die_at", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(run(args.checkpoint_dir, args.markers, args.die_at)))

"""A batch job whose step after a `StrongProduction` checkpoint loses its
Python worker once, for the strong-production test (its own process, on the
runner's default master, which retries tasks).

The step upstream of the checkpoint notes each element in a file as it
computes it: a side effect, as a non-deterministic step's answer would be.
"""

from __future__ import annotations

import argparse
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import SparkRunner
from tests.runners.batch_retry_job import die_once
from transforms.millwheel.productions import StrongProduction

ELEMENTS = 20


def note(path: str, element: int) -> int:
    """Appends `element` to `path`, one line per computation of it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{element}\n".encode())
    finally:
        os.close(fd)
    return element


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--computed", required=True)
    parser.add_argument("--markers", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    def step(element: int) -> int:
        if element == ELEMENTS // 2:
            die_once(args.markers, "step")
        return element * 10

    with beam.Pipeline(runner=SparkRunner(), options=PipelineOptions()) as p:
        (
            p
            | beam.Create(range(ELEMENTS))
            | "Compute" >> beam.Map(lambda e: note(args.computed, e))
            | StrongProduction(beam.Map(step))
            | beam.Map(str)
            | beam.io.WriteToText(args.output)
        )


if __name__ == "__main__":
    main()

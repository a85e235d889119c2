"""Running the Zeitgeist transforms over a TestStream on the DirectRunner."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z, a window boundary for any size
MINUTE = 60_000


def streaming_pipeline() -> TestPipeline:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return TestPipeline(options=options)


def window_index(start_ms: int, size_ms: int = MINUTE) -> int:
    return (start_ms - T0) // size_ms


def expect(pcoll, expected, project, label):
    """Assert that `pcoll`, mapped through `project`, equals `expected`."""
    assert_that(
        pcoll | f"Project{label}" >> beam.Map(project),
        equal_to(expected),
        label=f"Check{label}",
    )

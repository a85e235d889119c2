"""Beam's TestStream-based suites, in streaming, on SparkRunner (local[2]).

Beam's tests build their pipelines with ``TestPipeline(options=...)`` or
``beam.Pipeline(options=...)`` and no runner, so they run on Beam's default
runner; the fixture points that default, and ``--test-pipeline-options``,
at this runner for the duration of each test. Every skip carries its reason.
"""

from __future__ import annotations

import unittest

import pytest
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline

for _needed in ("hamcrest", "tenacity"):
    pytest.importorskip(_needed, reason=f"Beam's suites need {_needed}")

from apache_beam.testing import test_stream_test  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]

RUNNER = "runners.spark.SparkRunner"


@pytest.fixture(autouse=True)
def _beam_default_runner_is_spark(monkeypatch):
    monkeypatch.setattr(StandardOptions, "DEFAULT_RUNNER", RUNNER)
    monkeypatch.setattr(
        TestPipeline, "pytest_test_pipeline_options", f"--runner={RUNNER} --streaming"
    )


# test name -> why it does not run on this runner.
SKIPS: dict[str, str] = {
    "test_windowed_values_interpreted_correctly": (
        "scripts an element in an IntervalWindow into a PCollection whose "
        "window coder is the global window's: a runner that moves elements "
        "as bytes cannot encode it (Beam's DirectRunner passes objects)"
    ),
    "test_basic_execution_with_service": (
        "events from a TestStreamService over gRPC are not read; the runner "
        "executes the events given in the pipeline"
    ),
}


class _Skips:
    def setUp(self) -> None:
        reason = SKIPS.get(self._testMethodName)
        if reason:
            raise unittest.SkipTest(reason)
        super().setUp()


class SparkTestStreamTest(_Skips, test_stream_test.TestStreamTest):
    """Beam's ``TestStreamTest`` on SparkRunner."""

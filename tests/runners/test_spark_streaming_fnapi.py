"""Beam's runner suite (``FnApiRunnerTest``) on SparkRunner in streaming,
the way Beam runs it against its Flink runner: every pipeline with
``--streaming``, so it goes through micro-batches, durable state and
watermarks instead of the batch path. Every skip carries its reason."""

from __future__ import annotations

import unittest

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import SparkRunner

for _needed in ("hamcrest", "tenacity"):
    pytest.importorskip(_needed, reason=f"Beam's runner suite needs {_needed}")

from apache_beam.runners.portability.fn_api_runner import fn_runner_test  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]

# test name -> why it does not run in streaming on this runner.
SKIPS: dict[str, str] = {
    "test_batch_rebatch_pardos": (
        "asserts a warning raised in the worker; Spark's Python workers are "
        "separate processes (Beam's portable runners skip it too)"
    ),
}


class SparkRunnerStreamingConformanceTest(fn_runner_test.FnApiRunnerTest):
    """FnApiRunnerTest with every pipeline on SparkRunner, streaming."""

    def create_pipeline(self, is_drain: bool = False) -> beam.Pipeline:
        return beam.Pipeline(
            runner=SparkRunner(is_drain=is_drain),
            options=PipelineOptions(["--streaming"]),
        )

    def setUp(self) -> None:
        reason = SKIPS.get(self._testMethodName)
        if reason:
            raise unittest.SkipTest(reason)
        super().setUp()

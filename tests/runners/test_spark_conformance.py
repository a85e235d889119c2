"""Beam's own runner suite (``FnApiRunnerTest``) on SparkRunner, local[2].

Every skip carries its reason. Beam's Java Spark portable runner skips, for
comparison, are in ``apache_beam/runners/portability/spark_runner_test.py``.
"""

from __future__ import annotations

import unittest

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import SparkRunner

# Beam's test module imports these test-only packages (the `test` extra).
for _needed in ("hamcrest", "tenacity"):
    pytest.importorskip(_needed, reason=f"Beam's runner suite needs {_needed}")

from apache_beam.runners.portability.fn_api_runner import fn_runner_test  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]

# test name -> why it does not run on this runner.
SKIPS: dict[str, str] = {
    "test_batch_rebatch_pardos": (
        "asserts a warning raised in the worker; Spark's Python workers are "
        "separate processes (Beam's portable runners skip it too)"
    ),
    "test_sdf_default_truncate_when_unbounded": (
        "drain (truncating unbounded restrictions) needs streaming; portable "
        "runners skip it too"
    ),
    "test_sdf_with_truncate": (
        "drain (truncating unbounded restrictions) needs streaming; portable "
        "runners skip it too"
    ),
}


class SparkRunnerConformanceTest(fn_runner_test.FnApiRunnerTest):
    """FnApiRunnerTest with every pipeline on SparkRunner."""

    def create_pipeline(self, is_drain: bool = False) -> beam.Pipeline:
        return beam.Pipeline(runner=SparkRunner(), options=PipelineOptions([]))

    def setUp(self) -> None:
        reason = SKIPS.get(self._testMethodName)
        if reason:
            raise unittest.SkipTest(reason)
        super().setUp()

"""Beam's other TestStream suites on SparkRunner in streaming: triggers,
deduplication, the leader-board example. Too slow for every run (each
TestStream step is a micro-batch), so they carry the ``acceptance`` marker,
which the default test command leaves out:

    python -m pytest -m acceptance tests/runners/test_spark_streaming_acceptance.py
"""

from __future__ import annotations

import pytest

for _needed in ("hamcrest", "tenacity", "mock"):
    pytest.importorskip(_needed, reason=f"Beam's suites need {_needed}")

from apache_beam.examples.complete.game import leader_board_test  # noqa: E402
from apache_beam.transforms import deduplicate_test, trigger_test  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.acceptance,
    pytest.mark.beam_suite_on_spark,
]


class SparkTriggerPipelineTest(trigger_test.TriggerPipelineTest):
    """Beam's trigger pipelines (batch and TestStream) on SparkRunner."""


class SparkDeduplicateTest(deduplicate_test.DeduplicateTest):
    """Beam's Deduplicate transforms over TestStream on SparkRunner."""


class SparkLeaderBoardTest(leader_board_test.LeaderBoardTest):
    """Beam's leader-board example over TestStream on SparkRunner."""

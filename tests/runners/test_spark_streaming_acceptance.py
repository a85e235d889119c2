"""Beam's other TestStream suites on SparkRunner in streaming: triggers,
deduplication, the leader-board example, side inputs (triggered and
windowed), combiners (fanout, timestamp combiners, accumulation modes) and
GroupIntoBatches (buffering timers). About six minutes together (each
TestStream step is a micro-batch), so they carry the ``acceptance`` marker,
which the default test command leaves out:

    python -m pytest -m acceptance tests/runners/test_spark_streaming_acceptance.py
"""

from __future__ import annotations

import unittest

import pytest

for _needed in ("hamcrest", "tenacity", "mock", "parameterized"):
    pytest.importorskip(_needed, reason=f"Beam's suites need {_needed}")

from apache_beam.examples.complete.game import leader_board_test  # noqa: E402
from apache_beam.transforms import (  # noqa: E402
    combiners_test,
    deduplicate_test,
    sideinputs_test,
    trigger_test,
    util_test,
)

_UNORDERED_FANOUT = (
    "asserts the order of the values inside a ToList combine's result after "
    "fanout; a runner that merges accumulators from several tasks does not "
    "keep it (the values themselves are right)"
)

_EVERY_PANE = (
    "expects the view of a side input fired twice in a window to hold both "
    "panes, [100, 0], as Beam's Python runners keep every pane (Beam runs it "
    "in batch only, BEAM-9499); in streaming Beam serves the latest firing, "
    "the on-time pane [0], which is what this runner reads "
    "(test_spark_streaming.py: "
    "test_a_side_input_fired_again_and_again_shows_its_latest_pane)"
)

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


class SparkSideInputsTest(sideinputs_test.SideInputsTest):
    """Beam's side-input tests, triggered and windowed side inputs over
    TestStream included, on SparkRunner."""

    @unittest.skip(_EVERY_PANE)
    def test_multi_triggered_gbk_side_input(self):
        pass


class SparkTimestampCombinerTest(combiners_test.TimestampCombinerTest):
    """Beam's timestamp-combiner tests over TestStream on SparkRunner."""


class SparkCombineTest(combiners_test.CombineTest):
    """Beam's combiner tests (fanout, accumulation modes) on SparkRunner."""

    @unittest.skip(_UNORDERED_FANOUT)
    def test_combining_with_session_windows_and_fanout(self):
        pass

    @unittest.skip(_UNORDERED_FANOUT)
    def test_combining_with_sliding_windows_and_fanout(self):
        pass


class SparkGroupIntoBatchesTest(util_test.GroupIntoBatchesTest):
    """Beam's GroupIntoBatches (buffering timers, streaming) on SparkRunner."""

"""The per-bundle record cap of a splittable DoFn (`stage_executor._RecordCap`).

The harness here is a stand-in: the failure it replays is a race inside
Beam's SDK worker (a split asked for after a bundle's outputs are counted
and before any is sized, seen once in ten minutes at 20,000 records/s), which
a real bundle cannot be made to hit on demand. The cap's behaviour on real
bundles is covered by `test_spark_streaming.py` (`--streaming_max_records_per_batch`).
"""

from __future__ import annotations

import threading

from apache_beam.portability.api import beam_fn_api_pb2

from runners.spark.stage_executor import _RecordCap


class _HarnessWhoseFirstSplitHitsTheRace:
    def __init__(self, outputs_so_far: int) -> None:
        self.outputs_so_far = outputs_so_far
        self.split_requests = 0
        self.split_made = threading.Event()

    def output_count(self, instruction_id: str, pcollections: set[str]) -> int:
        return self.outputs_so_far

    def checkpoint(self, instruction_id: str):
        self.split_requests += 1
        if self.split_requests == 1:
            # What Beam raises when its output byte estimate is NaN.
            raise ValueError("cannot convert float NaN to integer")
        self.split_made.set()
        return beam_fn_api_pb2.ProcessBundleSplitResponse(
            channel_splits=[beam_fn_api_pb2.ProcessBundleSplitResponse.ChannelSplit()]
        )


def test_a_split_refused_by_the_byte_estimate_race_is_asked_again():
    harness = _HarnessWhoseFirstSplitHitsTheRace(outputs_so_far=500)
    cap = _RecordCap(harness, "bundle-1", {"out"}, limit=100)
    assert harness.split_made.wait(5), "the cap gave up after the failed request"
    split = cap.stop()
    assert harness.split_requests == 2
    assert split is not None and len(split.channel_splits) == 1


def test_no_split_is_asked_for_under_the_limit():
    harness = _HarnessWhoseFirstSplitHitsTheRace(outputs_so_far=99)
    cap = _RecordCap(harness, "bundle-1", {"out"}, limit=100)
    assert not harness.split_made.wait(0.2)
    assert cap.stop() is None
    assert harness.split_requests == 0

"""One poll of a followed directory, driven as a runner drives it between
batches, without a runner: for the follow tests and the benchmark of a
poll's cost."""

from __future__ import annotations

from typing import Any

from apache_beam.runners.sdf_utils import (
    RestrictionTrackerView,
    ThreadsafeRestrictionTracker,
)
from apache_beam.transforms.window import TimestampedValue

from transforms.records.follow import FollowRecords, FollowSettings
from transforms.records.followed_files import FollowedFiles, FollowedFilesTracker
from transforms.records.injector_watermark import InjectorState, InjectorWatermark


def poll(
    follow: FollowRecords,
    restriction: FollowedFiles,
    watermark: InjectorWatermark | None = None,
) -> tuple[list[Any], FollowedFiles | None]:
    """What one poll of `follow`'s source output (records and tagged dead
    letters), and the restriction it left for the next poll (None when it
    deferred none). Each poll is a fresh worker's: its DoFn is set up anew."""
    fn = follow._follow
    fn.setup()
    watermark = watermark or InjectorWatermark(InjectorState(), FollowSettings())
    tracker = ThreadsafeRestrictionTracker(FollowedFilesTracker(restriction))
    outputs = list(
        fn.process(None, tracker=RestrictionTrackerView(tracker), _watermark=watermark)
    )
    deferred = tracker.deferred_status()
    return outputs, deferred[0] if deferred else None


def poll_checkpointed(
    follow: FollowRecords,
    restriction: FollowedFiles,
    state: InjectorState,
    after_outputs: int,
) -> tuple[list[Any], FollowedFiles | None, InjectorState | None]:
    """One poll during which the runner asks for a checkpoint once the poll
    has output `after_outputs` elements, as the SparkRunner does at
    `--streaming_max_records_per_batch` (from another thread, between two
    outputs). The runner asks as Beam's SDK harness splits a splittable
    DoFn (`PerWindowInvoker._try_split`): it takes the watermark estimator's
    state, then splits the restriction; the remainder resumes with that
    state. Each output's timestamp is observed as the harness observes it.

    Returns the outputs, and the remainder to resume (the split's, or the
    one the DoFn deferred itself; None if neither) with the watermark state
    it resumes with."""
    fn = follow._follow
    fn.setup()
    watermark = InjectorWatermark(state, fn._settings)
    tracker = ThreadsafeRestrictionTracker(FollowedFilesTracker(restriction))
    view = RestrictionTrackerView(tracker)
    outputs: list[Any] = []
    split = None
    for output in fn.process(None, tracker=view, _watermark=watermark):
        outputs.append(output)
        if isinstance(output, TimestampedValue):
            watermark.observe_timestamp(output.timestamp)
        if len(outputs) == after_outputs:
            split_state = watermark.get_estimator_state()
            parts = tracker.try_split(0)
            if parts is not None:
                split = parts[1], split_state
    deferred = tracker.deferred_status()
    if deferred:
        assert split is None, "a restriction split and deferred both"
        return outputs, deferred[0], watermark.get_estimator_state()
    if split is not None:
        return outputs, *split
    return outputs, None, None

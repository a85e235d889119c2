"""One poll of a followed directory, driven as a runner drives it between
batches, without a runner: for the follow tests and the benchmark of a
poll's cost."""

from __future__ import annotations

from typing import Any

from apache_beam.runners.sdf_utils import (
    RestrictionTrackerView,
    ThreadsafeRestrictionTracker,
)

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

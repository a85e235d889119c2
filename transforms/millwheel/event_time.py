"""Event time as integer milliseconds, and its conversions to Beam timestamps.

Records carry event time as milliseconds since the Unix epoch (an int64 in
protobuf, exact and cheap to compare). Beam timestamps are microseconds; these
helpers are the one place where the two meet.
"""

from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import (
    BoundedWindow,
    GlobalWindow,
    GlobalWindows,
    TimestampedValue,
)
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import WindowedValue


def to_timestamp(ms: int) -> Timestamp:
    """The Beam timestamp of an event time in milliseconds."""
    return Timestamp(micros=ms * 1000)


def last_instant(end_ms: int) -> Timestamp:
    """The last microsecond before ``end_ms``: when an end-of-window timer is
    set, as Beam's GroupByKey sets its own (the window's max timestamp).

    Beam's model fires an event-time timer once the watermark has passed it;
    a timer at the last instant therefore fires as soon as the watermark
    reaches the window's end, on every runner (Beam's Python DirectRunner
    also fires a timer whose time the watermark has only reached).
    """
    return Timestamp(micros=ms_to_micros(end_ms) - 1)


def ms_to_micros(ms: int) -> int:
    """Microseconds of an event time in milliseconds."""
    return ms * 1000


def to_millis(ts: Timestamp) -> int:
    """Milliseconds of a Beam timestamp, rounded down."""
    return ts.micros // 1000


def restamped(value, timestamp: Timestamp, window: BoundedWindow):
    """What a DoFn outputs for `value` at `timestamp`: its
    `TimestampedValue`, made directly where the runner would put it when the
    input element's `window` is the global window.

    A DoFn output with a new timestamp has its windows assigned again, per
    element. In the global window that gives the global window back, but
    Beam builds a `GlobalWindow` for it each time and recomputes its end from
    the protocol's constants: several microseconds per element, a sizeable
    part of the batch detection's cost per window. Elements of other windows
    are assigned by the runner as usual.
    """
    if isinstance(window, GlobalWindow):
        return WindowedValue(value, timestamp, (window,))
    return TimestampedValue(value, timestamp)


def window_start(event_time_ms: int, window_ms: int) -> int:
    """Start of the fixed window of size `window_ms` holding `event_time_ms`.

    Windows are aligned to the epoch, so every key and every worker agrees on
    the boundaries without coordination.
    """
    return event_time_ms - event_time_ms % window_ms


def require_global_window(pcoll: beam.PCollection, transform: str, why: str) -> None:
    """Raises ValueError, at expand, if `pcoll` is not in the global window.

    The MillWheel transforms keep their state per key in the global window
    and set their own event-time timers; in windows of the user's, each
    window would get state of its own (`why` says what that breaks)."""
    windowfn = pcoll.windowing.windowfn
    if not isinstance(windowfn, GlobalWindows):
        raise ValueError(
            f"{transform} needs its input in the global window, got {windowfn!r}: "
            f"{why}. Remove the WindowInto before it."
        )


class WithEventTimestamps(beam.PTransform):
    """Gives each record (anything with an `event_time` in ms) that Beam timestamp.

    Sources stamp records with read time or file time; event-time windows,
    timers and the watermark need the time the event happened. The element
    type is kept, so protobuf records keep their coder. An element without
    an integer `event_time` that Beam can hold as a timestamp is left as it
    came: Zeitgeist and Photon dead-letter it with the reason, where
    stamping it would fail the job.
    """

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        return records | "Stamp" >> beam.Map(_stamp).with_output_types(
            records.element_type
        )


# Event times in ms that Beam can hold as timestamps.
_FIRST_STAMPABLE_MS = -(-MIN_TIMESTAMP.micros // 1000)
_LAST_STAMPABLE_MS = MAX_TIMESTAMP.micros // 1000


def _stamp(record) -> Any:
    event_time = getattr(record, "event_time", None)
    if type(event_time) is not int:
        return record
    if not _FIRST_STAMPABLE_MS <= event_time <= _LAST_STAMPABLE_MS:
        return record
    return TimestampedValue(record, to_timestamp(event_time))

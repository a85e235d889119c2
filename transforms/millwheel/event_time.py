"""Event time as integer milliseconds, and its conversions to Beam timestamps.

Records carry event time as milliseconds since the Unix epoch (an int64 in
protobuf, exact and cheap to compare). Beam timestamps are microseconds; these
helpers are the one place where the two meet.
"""

from apache_beam.utils.timestamp import Timestamp


def to_timestamp(ms: int) -> Timestamp:
    """The Beam timestamp of an event time in milliseconds."""
    return Timestamp(micros=ms * 1000)


def to_millis(ts: Timestamp) -> int:
    """Milliseconds of a Beam timestamp, rounded down."""
    return ts.micros // 1000


def window_start(event_time_ms: int, window_ms: int) -> int:
    """Start of the fixed window of size `window_ms` holding `event_time_ms`.

    Windows are aligned to the epoch, so every key and every worker agrees on
    the boundaries without coordination.
    """
    return event_time_ms - event_time_ms % window_ms

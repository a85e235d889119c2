"""Watermark of one stage over one partition.

Batch has two points: before the input is consumed the input watermark is
-inf, afterwards +inf, and every event-time timer is then due. Streaming will
replace this with a per-stage manager (input watermark = min over upstream
output watermarks; output watermark = min of input watermark, timer holds and
pending work) behind the same two methods.
"""

from __future__ import annotations

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp


class BatchWatermark:
    """The input watermark of a batch stage: -inf, then +inf."""

    def __init__(self) -> None:
        self._value = MIN_TIMESTAMP

    def current(self) -> Timestamp:
        """The current input watermark."""
        return self._value

    def input_exhausted(self) -> None:
        """All input has been processed: event time moves to the end."""
        self._value = MAX_TIMESTAMP

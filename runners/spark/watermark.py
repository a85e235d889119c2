"""Time as one stage sees it in one task: when timers are due, and what
happens to a splittable DoFn's deferred remainder.

The stage executor asks a :class:`StageTime`. Batch (:class:`BatchTime`)
has two points: before the input is consumed nothing is due; afterwards the
watermark is +inf, and processing-time timers are due too, since no clock
will ever move again; a deferred remainder is resumed at once, its requested
delay ignored. A micro-batch (:class:`MicroBatchTime`) has the input
watermark and processing time the driver logged for the batch: event-time
timers are due strictly before the watermark (Beam's rule: a timer at ``t``
fires once the watermark has passed ``t``), processing-time timers at or
before the batch's processing time, with or without input; deferred
remainders go back to the driver, which resumes them in a later batch.
"""

from __future__ import annotations

from typing import Any, Protocol

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

MIN_MICROS = MIN_TIMESTAMP.micros
MAX_MICROS = MAX_TIMESTAMP.micros


def event_horizon(watermark: int) -> int:
    """The latest event-time timer (µs) due at ``watermark``: strictly
    before it (Beam's rule), and everything once it is +inf."""
    return MAX_MICROS if watermark >= MAX_MICROS else watermark - 1


class StageTime(Protocol):
    """The watermark policy injected into the stage executor."""

    def event_horizon(self) -> int:
        """Event-time timers at or before this (µs) are due."""

    def processing_horizon(self) -> int:
        """Processing-time timers at or before this (µs) are due."""

    def input_exhausted(self) -> None:
        """The task has processed all its input elements."""

    def resume_now(self, residuals: list[Any]) -> list[bytes]:
        """Of a bundle's residual roots, the encoded elements to resume in
        this task; the others are kept by the policy."""

    def record_cap(self) -> int | None:
        """Outputs after which a bundle of a splittable DoFn is checkpointed
        (None: it runs until it defers by itself)."""


class BatchTime:
    """Batch: nothing due until the input is consumed, then everything."""

    def __init__(self) -> None:
        self._horizon = MIN_MICROS

    def event_horizon(self) -> int:
        return self._horizon

    def processing_horizon(self) -> int:
        return self._horizon

    def input_exhausted(self) -> None:
        self._horizon = MAX_MICROS

    def resume_now(self, residuals: list[Any]) -> list[bytes]:
        return [r.application.element for r in residuals]

    def record_cap(self) -> int | None:
        return None


class MicroBatchTime:
    """One micro-batch: the driver's watermark and processing time.

    Residual roots (a splittable DoFn that deferred its remainder, or was
    checkpointed once it had output ``max_records`` elements) are kept in
    ``deferred`` for the driver, with their requested delay and the
    watermark their estimator reported: a later batch resumes them.
    """

    def __init__(
        self,
        input_watermark: int,
        processing_time: int,
        max_records: int | None = None,
    ) -> None:
        self.input_watermark = input_watermark
        self.processing_time = processing_time
        self.max_records = max_records
        self.deferred: list[Any] = []

    def event_horizon(self) -> int:
        return event_horizon(self.input_watermark)

    def processing_horizon(self) -> int:
        return self.processing_time

    def input_exhausted(self) -> None:
        """The horizons are fixed for the whole batch."""

    def resume_now(self, residuals: list[Any]) -> list[bytes]:
        self.deferred.extend(residuals)
        return []

    def record_cap(self) -> int | None:
        return self.max_records

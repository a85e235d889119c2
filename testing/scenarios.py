"""`TestStream` scenarios of `SearchQuery` records for streaming pipeline tests.

A scenario is a script of element batches and watermark advances. Elements
carry their `event_time` as the Beam timestamp. Every built stream ends the
same way: the watermark goes to a finite time, a margin past the last element
and the last watermark, and only then to infinity. On the Python DirectRunner,
event-time timers still pending when the watermark jumps straight to infinity
never fire, so the finite step is what lets window-boundary timers, and
zero-count windows, fire at the end of a test.

Elements added after the watermark has passed their event time are late, as
they would be in production: that is how tests exercise late-data policies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np
from apache_beam.coders import ProtoCoder
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

from testing.zeitgeist_generator import HOUR_MS, GeneratedStream
from transforms.millwheel.event_time import to_timestamp
from transforms.records import zeitgeist_pb2

DEFAULT_END_MARGIN_MS = HOUR_MS
T = TypeVar("T")


def timestamped(
    elements: Iterable[T], time_fn: Callable[[T], int]
) -> list[TimestampedValue]:
    """Wrap elements with the timestamp `time_fn` gives in epoch milliseconds."""
    return [TimestampedValue(e, to_timestamp(time_fn(e))) for e in elements]


class ZeitgeistScenario:
    """Builds a `TestStream` of `SearchQuery` step by step.

    `add` queues records at the current point of the script; the next
    `advance_watermark`, `advance_processing_time` or `build` emits the queued
    records as one batch. Methods return the scenario so calls chain.
    """

    def __init__(self) -> None:
        # (TestStream method, argument) pairs, replayed by `build`.
        self._steps: list[tuple[str, object]] = []
        self._pending: list[TimestampedValue] = []
        self._watermark_ms: int | None = None
        self._latest_element_ms: int | None = None
        self._added = 0

    @property
    def watermark_ms(self) -> int | None:
        """The last watermark set, or None before the first advance."""
        return self._watermark_ms

    def add(
        self,
        query: str,
        event_time_ms: int,
        count: int = 1,
        record_id: str | None = None,
    ) -> ZeitgeistScenario:
        """Queue one record; the default id is unique within the scenario."""
        record = zeitgeist_pb2.SearchQuery(
            query=query,
            event_time=event_time_ms,
            record_id=f"scenario-{self._added}" if record_id is None else record_id,
            count=count,
        )
        return self.add_record(record)

    def add_record(self, record: zeitgeist_pb2.SearchQuery) -> ZeitgeistScenario:
        """Queue a copy of `record`, timestamped with its `event_time`."""
        copy = zeitgeist_pb2.SearchQuery()
        copy.CopyFrom(record)
        self._pending.append(TimestampedValue(copy, to_timestamp(copy.event_time)))
        self._added += 1
        if self._latest_element_ms is None or copy.event_time > self._latest_element_ms:
            self._latest_element_ms = copy.event_time
        return self

    def advance_watermark(self, watermark_ms: int) -> ZeitgeistScenario:
        """Emit queued records, then move the watermark; it must increase."""
        if self._watermark_ms is not None and watermark_ms <= self._watermark_ms:
            raise ValueError(
                f"watermark must increase: {watermark_ms} after {self._watermark_ms}"
            )
        self._flush()
        self._steps.append(("advance_watermark_to", to_timestamp(watermark_ms)))
        self._watermark_ms = watermark_ms
        return self

    def advance_processing_time(self, seconds: float) -> ZeitgeistScenario:
        """Emit queued records, then advance processing time (REAL_TIME timers)."""
        if seconds <= 0:
            raise ValueError(f"processing time must advance, got {seconds}")
        self._flush()
        self._steps.append(("advance_processing_time", seconds))
        return self

    def build(self, end_margin_ms: int = DEFAULT_END_MARGIN_MS) -> TestStream:
        """The `TestStream`, ending finite-then-infinite as the module explains.

        `end_margin_ms` must reach past the last timer the pipeline under test
        sets, such as GC or activity-horizon timers. Building does not change
        the scenario, so it may be built again or extended.
        """
        stream = TestStream(coder=ProtoCoder(zeitgeist_pb2.SearchQuery))
        pending = [("add_elements", self._pending)] if self._pending else []
        for method, argument in self._steps + pending:
            getattr(stream, method)(argument)
        marks = [
            m for m in (self._latest_element_ms, self._watermark_ms) if m is not None
        ]
        if marks:
            stream.advance_watermark_to(to_timestamp(max(marks) + end_margin_ms))
        return stream.advance_watermark_to_infinity()

    def _flush(self) -> None:
        if self._pending:
            self._steps.append(("add_elements", self._pending))
            self._pending = []


def from_generated(
    stream: GeneratedStream,
    watermark_lag_ms: int | None = None,
    batch_size: int = 100,
    end_margin_ms: int = DEFAULT_END_MARGIN_MS,
) -> TestStream:
    """Replay a generated stream in arrival order behind a trailing watermark.

    Before each batch the watermark moves to the batch's first arrival time
    minus the lag (the spec's `watermark_lag_ms` by default). A record whose
    arrival delay exceeds the lag always starts a new batch, so it is exactly
    the records with delay > lag that arrive behind the watermark; with the
    spec's lag those are the generator's late records (`stream.is_late`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    lag = stream.spec.watermark_lag_ms if watermark_lag_ms is None else watermark_lag_ms
    starts = np.union1d(
        np.arange(0, len(stream), batch_size), np.flatnonzero(stream.delay_ms > lag)
    )
    first_in_batch = np.zeros(len(stream), dtype=bool)
    first_in_batch[starts] = True
    scenario = ZeitgeistScenario()
    records = zip(
        stream.iter_events(),
        first_in_batch.tolist(),
        stream.arrival_ms.tolist(),
        strict=True,
    )
    for record, starts_batch, arrival_ms in records:
        if starts_batch:
            watermark = arrival_ms - lag
            if scenario.watermark_ms is None or watermark > scenario.watermark_ms:
                scenario.advance_watermark(watermark)
        scenario.add_record(record)
    return scenario.build(end_margin_ms)

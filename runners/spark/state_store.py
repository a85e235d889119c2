"""Where a stage keeps user state and timers: the interface, and batch's
in-memory implementation.

The stage executor sees a :class:`StageState`: a state servicer for the
SDK's state API (user state and side inputs) and a :class:`TimerStore`. Batch
keeps both for the lifetime of one Spark task (:class:`InMemoryStageState`):
a stateful stage's input is hash-partitioned by key, so every element and
timer of a key is processed by the same task, and nothing needs to outlive
it. Streaming keeps them in versioned key-group files
(``streaming_state.DurableStageState``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any, Protocol

from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from runners.spark.plan import TimerFamily

EVENT_TIME = beam_runner_api_pb2.TimeDomain.EVENT_TIME


class TimerStore(Protocol):
    """Pending timers of one task, handed out one at a time in time order.

    Horizons are microseconds: an event-time timer is due at or before
    ``event_horizon``, a processing-time timer at or before
    ``processing_horizon``; event-time timers go first. What the horizons are
    (batch: +inf once the input is consumed; streaming: the batch's watermark
    and processing time) is the :class:`~runners.spark.watermark.StageTime`'s
    policy, not the store's.
    """

    def bind_coder(self, transform_id: str, family_id: str, coder_impl: Any) -> None:
        """The SDK's coder of a timer family, for stores that persist timers."""

    def record(self, transform_id: str, family_id: str, timer: Any) -> None:
        """Applies a ``userstate.Timer`` a DoFn just set or cleared."""

    def has_due(self, event_horizon: int, processing_horizon: int) -> bool:
        """Whether a timer is due."""

    def pop_due(
        self, event_horizon: int, processing_horizon: int
    ) -> tuple[str, str, Any] | None:
        """Removes the earliest due timer: (transform, family, timer), or None."""


class StageState(Protocol):
    """User state, side inputs and timers of one stage in one task."""

    servicer: Any
    timers: TimerStore

    def commit(self) -> list:
        """The task succeeded: makes its changes durable. Returns what the
        driver must learn of them (nothing, in batch)."""

    def abandon(self) -> None:
        """The task failed: drops its changes."""


class InMemoryStageState:
    """Batch: Beam's in-memory state servicer and a :class:`TimerQueue`,
    both gone when the task ends."""

    def __init__(
        self,
        side_input_entries: Iterable[tuple[bytes, bytes]],
        families: Iterable[TimerFamily],
    ) -> None:
        self.servicer = state_servicer(side_input_entries)
        self.timers = TimerQueue(families)

    def commit(self) -> list:
        return []

    def abandon(self) -> None:
        """Nothing outlives the task."""


def state_servicer(side_input_entries: Iterable[tuple[bytes, bytes]]) -> Any:
    """Beam's in-memory state servicer, preloaded with side-input contents.

    It serves bag, multimap and ordered-list user state keyed by the SDK's
    encoded (transform, state id, key, window), and side inputs under their
    state keys.
    """
    servicer = worker_handlers.StateServicer()
    for key_bytes, data in side_input_entries:
        servicer.append_raw(beam_fn_api_pb2.StateKey.FromString(key_bytes), data)
    return servicer


class TimerQueue:
    """Pending timers of a partition, handed out one at a time in time order.

    Timers are identified as Beam does: (transform, family, key, dynamic tag,
    window); the last ``set`` wins and a ``clear`` removes. The executor
    records every set and clear the moment a DoFn makes it and takes the
    next due timer only after the previous callback has returned, so a
    callback that clears, moves or adds a timer of its key is honoured
    before any later timer fires, as Beam's Java SDK harness guarantees.

    Event-time timers due at their horizon fire before processing-time ones
    due at theirs. Ties fire in the order they were set. Heap entries are not
    removed when a timer is reset or cleared; they are skipped once their
    version is stale.
    Times are integer microseconds: Timestamp comparisons cost more.
    """

    def __init__(self, families: Iterable[TimerFamily]) -> None:
        self._event_time: list[tuple[int, int, tuple]] = []
        self._processing_time: list[tuple[int, int, tuple]] = []
        self._heaps = {
            (f.transform_id, f.family_id): self._event_time
            if f.time_domain == EVENT_TIME
            else self._processing_time
            for f in families
        }
        # ident -> (version, timer); heap entries of other versions are stale.
        self._pending: dict[tuple, tuple[int, Any]] = {}
        self._versions = itertools.count()

    def __len__(self) -> int:
        return len(self._pending)

    def bind_coder(self, transform_id: str, family_id: str, coder_impl: Any) -> None:
        """Timers stay decoded in memory."""

    def record(self, transform_id: str, family_id: str, timer: Any) -> None:
        """Applies a ``userstate.Timer`` a DoFn just set or cleared."""
        ident = (
            transform_id,
            family_id,
            _hashable(timer.user_key),
            timer.dynamic_timer_tag,
            timer.windows[0],
        )
        if timer.clear_bit:
            self._pending.pop(ident, None)
            return
        version = next(self._versions)
        self._pending[ident] = (version, timer)
        heap = self._heaps[transform_id, family_id]
        heapq.heappush(heap, (timer.fire_timestamp.micros, version, ident))

    def has_due(self, event_horizon: int, processing_horizon: int) -> bool:
        """Whether a timer is due."""
        return (
            self._earliest(self._event_time, event_horizon) is not None
            or self._earliest(self._processing_time, processing_horizon) is not None
        )

    def pop_due(
        self, event_horizon: int, processing_horizon: int
    ) -> tuple[str, str, Any] | None:
        """Removes the earliest due timer: (transform, family, timer), or None."""
        heap = self._event_time
        if self._earliest(heap, event_horizon) is None:
            heap = self._processing_time
            if self._earliest(heap, processing_horizon) is None:
                return None
        _, _, ident = heapq.heappop(heap)
        _, timer = self._pending.pop(ident)
        return ident[0], ident[1], timer

    def _earliest(self, heap: list, horizon: int) -> tuple | None:
        """The heap's earliest live entry if it is due, dropping stale ones."""
        while heap:
            fire, version, ident = heap[0]
            entry = self._pending.get(ident)
            if entry is None or entry[0] != version:
                heapq.heappop(heap)  # cleared or reset since it was pushed
                continue
            return heap[0] if fire <= horizon else None
        return None


def _hashable(key: Any) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)

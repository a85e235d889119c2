"""In-memory user state, side-input state and timers of one partition.

Batch keeps state for the lifetime of one Spark task: a stateful stage's input
is hash-partitioned by key, so every element and timer of a key is processed
by the same task, and nothing needs to outlive it. Streaming will put a
versioned store keyed by key group behind the same interface.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any

from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.utils.timestamp import Timestamp

from runners.spark.plan import TimerFamily

EVENT_TIME = beam_runner_api_pb2.TimeDomain.EVENT_TIME


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

    Event-time timers are due at or before the watermark; processing-time
    timers once no event-time timer is (batch drains them at the end). Ties
    fire in the order they were set. Heap entries are not removed when a
    timer is reset or cleared; they are skipped once their version is stale.
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

    def has_due(self, watermark: Timestamp) -> bool:
        """Whether a timer is due at ``watermark``."""
        return (
            self._earliest(self._event_time, watermark.micros) is not None
            or self._earliest(self._processing_time, None) is not None
        )

    def pop_due(self, watermark: Timestamp) -> tuple[str, str, Any] | None:
        """Removes the earliest due timer: (transform, family, timer), or None."""
        heap = self._event_time
        if self._earliest(heap, watermark.micros) is None:
            heap = self._processing_time
            if self._earliest(heap, None) is None:
                return None
        _, _, ident = heapq.heappop(heap)
        _, timer = self._pending.pop(ident)
        return ident[0], ident[1], timer

    def _earliest(self, heap: list, watermark: int | None) -> tuple | None:
        """The heap's earliest live entry if it is due, dropping stale ones."""
        while heap:
            fire, version, ident = heap[0]
            entry = self._pending.get(ident)
            if entry is None or entry[0] != version:
                heapq.heappop(heap)  # cleared or reset since it was pushed
                continue
            return heap[0] if watermark is None or fire <= watermark else None
        return None


def _hashable(key: Any) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)

"""In-memory user state, side-input state and timers of one partition.

Batch keeps state for the lifetime of one Spark task: a stateful stage's input
is hash-partitioned by key, so every element and timer of a key is processed
by the same task, and nothing needs to outlive it. Streaming will put a
versioned store keyed by key group behind the same interface.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.utils.timestamp import Timestamp

from runners.spark.components import decode_all, encode_chunks
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


class TimerStore:
    """Pending timers of a partition: the last set wins, a clear removes.

    Timers are identified as Beam does: (transform, family, key, dynamic tag,
    window). ``pop_round`` hands out, for each key, its earliest due timers
    only, so that a callback which sets or clears a later timer of the same
    key is honoured before that timer fires; with ``all_due`` it hands out
    every due timer, as Beam's FnApiRunner does.
    """

    def __init__(
        self, families: list[TimerFamily], context: Any, all_due: bool = False
    ) -> None:
        self._all_due = all_due
        self._coders = {
            (f.transform_id, f.family_id): context.coders[f.coder_id].get_impl()
            for f in families
        }
        self._event_time = _DueQueue()
        self._processing_time = _DueQueue()
        self._queues = {
            (f.transform_id, f.family_id): self._event_time
            if f.time_domain == EVENT_TIME
            else self._processing_time
            for f in families
        }
        # ident -> (version, timer); heap entries of older versions are stale.
        self._pending: dict[tuple, tuple[int, Any]] = {}
        self._versions = itertools.count()

    def __len__(self) -> int:
        return len(self._pending)

    def add_encoded(self, transform_id: str, family_id: str, data: bytes) -> None:
        """Records timers the SDK wrote for one family."""
        queue = self._queues[transform_id, family_id]
        for timer in decode_all(data, self._coders[transform_id, family_id]):
            ident = (
                transform_id,
                family_id,
                _hashable(timer.user_key),
                timer.dynamic_timer_tag,
                timer.windows[0],
            )
            if timer.clear_bit:
                self._pending.pop(ident, None)
            else:
                version = next(self._versions)
                self._pending[ident] = (version, timer)
                queue.push(ident, version, timer.fire_timestamp.micros)

    def pop_round(self, watermark: Timestamp) -> dict[tuple[str, str], list[bytes]]:
        """Removes and encodes the next due timers, grouped by family.

        Event-time timers are due at or before ``watermark``; processing-time
        timers are due once no event-time timer is (batch drains them at the
        end). Per key only the earliest due timestamp is taken, unless the
        store delivers all due timers.
        """
        earliest_only = not self._all_due
        due = self._event_time.pop_due(watermark.micros, self._is_live, earliest_only)
        if not due:
            due = self._processing_time.pop_due(None, self._is_live, earliest_only)
        fired = sorted(
            ((ident, self._pending.pop(ident)[1]) for ident in due),
            key=lambda pair: pair[1].fire_timestamp.micros,
        )
        by_family: dict[tuple[str, str], list[Any]] = {}
        for ident, timer in fired:
            by_family.setdefault(ident[:2], []).append(timer)
        return {
            family: list(encode_chunks(timers, self._coders[family]))
            for family, timers in by_family.items()
        }

    def _is_live(self, ident: tuple, version: int) -> bool:
        entry = self._pending.get(ident)
        return entry is not None and entry[0] == version


class _DueQueue:
    """Timers of one time domain, by key, each key's earliest first.

    A heap per key, and a heap with one live entry per key at its earliest
    timestamp, make a round cost its due keys rather than every pending
    timer: a batch stage whose keys hold thousands of open windows fires one
    window per key per round. Entries are not removed when a timer is reset
    or cleared; they are skipped once they no longer match. Times are
    integer microseconds: Timestamp comparisons cost more than the heaps.
    """

    def __init__(self) -> None:
        self._by_key: dict[Any, list[tuple[int, int, tuple]]] = {}
        self._keys: list[tuple[int, Any]] = []
        self._key_entry: dict[Any, int] = {}  # the live entry of each key

    def push(self, ident: tuple, version: int, fire: int) -> None:
        key = ident[2]
        heapq.heappush(self._by_key.setdefault(key, []), (fire, version, ident))
        entry = self._key_entry.get(key)
        if entry is None or fire < entry:
            self._enqueue(key, fire)

    def _enqueue(self, key: Any, fire: int) -> None:
        self._key_entry[key] = fire
        heapq.heappush(self._keys, (fire, _Ordered(key)))

    def pop_due(
        self,
        watermark: int | None,
        is_live: Callable[[tuple, int], bool],
        earliest_only: bool = True,
    ) -> list[tuple]:
        """Idents of live timers due by ``watermark`` (µs; None: any time):
        each key's earliest only, or all of them."""
        due: list[tuple] = []
        handled = []
        while self._keys and (watermark is None or self._keys[0][0] <= watermark):
            fire, ordered = heapq.heappop(self._keys)
            key = ordered.key
            if self._key_entry.get(key) != fire:
                continue  # superseded by an earlier entry of the same key
            del self._key_entry[key]
            timers = self._by_key[key]
            earliest = _drop_stale(timers, is_live)
            if earliest is None:
                del self._by_key[key]
            elif earliest > fire:
                # The timer this entry was pushed for was reset or cleared.
                self._enqueue(key, earliest)
            else:
                handled.append(key)
                last = earliest if earliest_only else watermark
                while timers and (last is None or timers[0][0] <= last):
                    _, version, ident = heapq.heappop(timers)
                    due.append(ident)
                    _drop_stale(timers, is_live)
        # Only now: a key's next timer must wait for the next round.
        for key in handled:
            timers = self._by_key[key]
            if timers:
                self._enqueue(key, timers[0][0])
            else:
                del self._by_key[key]
        return due


class _Ordered:
    """A heap payload that never compares keys (they may not be orderable)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Ordered) -> bool:
        return False


def _drop_stale(timers: list, is_live: Callable[[tuple, int], bool]) -> Any:
    """Pops stale entries off a key's heap; returns its earliest live time."""
    while timers and not is_live(timers[0][2], timers[0][1]):
        heapq.heappop(timers)
    return timers[0][0] if timers else None


def _hashable(key: Any) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


def iter_round(rounds: dict[tuple[str, str], list[bytes]]) -> Iterator[tuple]:
    """Flattens a round into (transform_id, family_id, encoded chunk)."""
    for (transform_id, family_id), chunks in rounds.items():
        for chunk in chunks:
            yield transform_id, family_id, chunk

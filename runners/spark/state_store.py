"""In-memory user state, side-input state and timers of one partition.

Batch keeps state for the lifetime of one Spark task: a stateful stage's input
is hash-partitioned by key, so every element and timer of a key is processed
by the same task, and nothing needs to outlive it. Streaming will put a
versioned store keyed by key group behind the same interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
    key is honoured before that timer fires.
    """

    def __init__(self, families: list[TimerFamily], context: Any) -> None:
        self._families = {(f.transform_id, f.family_id): f for f in families}
        self._coders = {
            (f.transform_id, f.family_id): context.coders[f.coder_id].get_impl()
            for f in families
        }
        self._pending: dict[tuple, Any] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add_encoded(self, transform_id: str, family_id: str, data: bytes) -> None:
        """Records timers the SDK wrote for one family."""
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
                self._pending[ident] = timer

    def pop_round(self, watermark: Timestamp) -> dict[tuple[str, str], list[bytes]]:
        """Removes and encodes the next due timers, grouped by family.

        Event-time timers are due at or before ``watermark``; processing-time
        timers are due once no event-time timer is (batch drains them at the
        end). Per key only the earliest due timestamp is taken.
        """
        due = self._select(watermark, event_time=True) or self._select(
            watermark, event_time=False
        )
        by_family: dict[tuple[str, str], list[Any]] = {}
        for ident in sorted(due, key=lambda i: self._pending[i].fire_timestamp):
            by_family.setdefault(ident[:2], []).append(self._pending.pop(ident))
        return {
            family: list(encode_chunks(timers, self._coders[family]))
            for family, timers in by_family.items()
        }

    def _select(self, watermark: Timestamp, event_time: bool) -> list[tuple]:
        earliest: dict[Any, Timestamp] = {}
        candidates = []
        for ident, timer in self._pending.items():
            family = self._families[ident[:2]]
            if (family.time_domain == EVENT_TIME) != event_time:
                continue
            if event_time and timer.fire_timestamp > watermark:
                continue
            key = ident[2]
            candidates.append((key, ident, timer.fire_timestamp))
            if key not in earliest or timer.fire_timestamp < earliest[key]:
                earliest[key] = timer.fire_timestamp
        return [ident for key, ident, ts in candidates if ts == earliest[key]]


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

"""Streaming's :class:`~runners.spark.state_store.StageState`: user state and
timers of one stateful stage in one micro-batch task, in durable key groups.

A key's group is ``crc32(nested key encoding) % key_groups``: the SDK names
user state by the key's nested encoding, and the runner partitions elements
and decodes timers' keys with the same coder, so a key's elements, state and
timers always meet in the same group and task. Groups are opened the first
time the task touches them (an element, a state request, a timer, or a
wake-up for a due timer); the task commits them all when it has produced its
last output, and reports each group's :class:`GroupSummary` to the driver.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from apache_beam.coders import coders
from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.worker.sdk_worker import _Future

from runners.spark.durable_store import (
    EVENT_DOMAIN,
    PROCESSING_DOMAIN,
    GroupSummary,
    KeyGroupStore,
    key_group_file,
)
from runners.spark.plan import TimerFamily
from runners.spark.state_store import state_servicer

_USER_STATE = "bag_user_state"
_ORDERED_LIST = "ordered_list_user_state"
# How the SDK's ordered-list state frames each (sort key, value) it appends.
_ORDERED_ENTRY = coders.TupleCoder(
    [coders.VarIntCoder(), coders.LengthPrefixCoder(coders.BytesCoder())]
).get_impl()


def key_group(nested_key: bytes, key_groups: int) -> int:
    """The key group of a key, from its nested encoding; equal everywhere."""
    return zlib.crc32(nested_key) % key_groups


def _length_prefixed(*parts: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


class KeyGroups:
    """The key-group files one task has opened for one batch."""

    def __init__(self, state_dir: str, stage: str, key_groups: int, batch: int):
        self._dir = Path(state_dir)
        self._stage = stage
        self.count = key_groups
        self._batch = batch
        self._open: dict[int, KeyGroupStore] = {}

    def group(self, group: int) -> KeyGroupStore:
        """The store of ``group``, opened (and rolled back if need be) once."""
        store = self._open.get(group)
        if store is None:
            store = KeyGroupStore(key_group_file(self._dir, group), self._batch)
            self._open[group] = store
        return store

    def for_key(self, nested_key: bytes) -> KeyGroupStore:
        """The store of the group ``nested_key`` hashes to."""
        return self.group(key_group(nested_key, self.count))

    def opened(self) -> Iterable[tuple[int, KeyGroupStore]]:
        """The groups opened so far, in group order."""
        return sorted(self._open.items())

    def commit(self) -> list[GroupSummary]:
        """Commits every opened group; returns their summaries."""
        summaries = []
        for group, store in self.opened():
            summaries.append(store.summary(self._stage, group))
            store.commit()
            # Committed and closed, it is no longer the task's to abandon
            # if a later group's commit fails (a full disk): the batch's
            # replay undoes it.
            del self._open[group]
        return summaries

    def abandon(self) -> None:
        """Rolls every group still open back."""
        opened, self._open = self.opened(), {}
        with contextlib.ExitStack() as stack:
            # Each one, even if another's rollback fails.
            for _, store in opened:
                stack.callback(store.abandon)


class DurableStateServicer:
    """Beam's state API over key groups (user state) and side inputs (in
    memory, as in batch)."""

    def __init__(self, groups: KeyGroups, side_input_entries) -> None:
        self._groups = groups
        self._side_inputs = state_servicer(side_input_entries)

    @contextlib.contextmanager
    def process_instruction_id(self, unused_instruction_id: str) -> Iterator:
        yield

    def done(self) -> None:
        """Nothing is buffered between requests."""

    def get_raw(self, state_key, continuation_token=None):
        kind = state_key.WhichOneof("type")
        if kind == _USER_STATE:
            cell = state_key.bag_user_state
            store = self._groups.for_key(cell.key)
            return b"".join(store.read(_cell_id(state_key))), None
        if kind == _ORDERED_LIST:
            cell = state_key.ordered_list_user_state
            store = self._groups.for_key(cell.key)
            chunks = store.read(_cell_id(state_key), cell.range.start, cell.range.end)
            return b"".join(chunks), None
        if kind.endswith("_user_state"):
            raise NotImplementedError(f"SparkRunner streaming: {kind} state")
        return self._side_inputs.get_raw(state_key, continuation_token)

    def append_raw(self, state_key, data: bytes):
        kind = state_key.WhichOneof("type")
        if kind == _USER_STATE:
            store = self._groups.for_key(state_key.bag_user_state.key)
            store.append(_cell_id(state_key), data)
        elif kind == _ORDERED_LIST:
            store = self._groups.for_key(state_key.ordered_list_user_state.key)
            cell = _cell_id(state_key)
            for sort_key, value in _ORDERED_ENTRY.decode_all(data):
                store.append(cell, _ORDERED_ENTRY.encode((sort_key, value)), sort_key)
        else:
            raise NotImplementedError(f"SparkRunner streaming: appending {kind}")
        return _Future.done()

    def clear(self, state_key):
        kind = state_key.WhichOneof("type")
        if kind == _USER_STATE:
            store = self._groups.for_key(state_key.bag_user_state.key)
            store.clear(_cell_id(state_key))
        elif kind == _ORDERED_LIST:
            cell = state_key.ordered_list_user_state
            store = self._groups.for_key(cell.key)
            store.clear(_cell_id(state_key), cell.range.start, cell.range.end)
        else:
            raise NotImplementedError(f"SparkRunner streaming: clearing {kind}")
        return _Future.done()


def _cell_id(state_key: beam_fn_api_pb2.StateKey) -> bytes:
    if state_key.WhichOneof("type") == _ORDERED_LIST:
        # One cell for the whole list: requests differ only by their range.
        copy = beam_fn_api_pb2.StateKey()
        copy.CopyFrom(state_key)
        copy.ordered_list_user_state.ClearField("range")
        state_key = copy
    return state_key.SerializeToString(deterministic=True)


class DurableTimers:
    """A :class:`~runners.spark.state_store.TimerStore` over key groups.

    Each timer is a row of its key's group, encoded with its family's SDK
    coder; the next due timer is found by an indexed query over the groups
    the task has opened, so a callback's sets and clears are seen before the
    next timer is chosen.
    """

    def __init__(
        self, groups: KeyGroups, families: Iterable[TimerFamily], key_coder: Any
    ) -> None:
        self._groups = groups
        self._domains = {
            (f.transform_id, f.family_id): EVENT_DOMAIN
            if f.time_domain == beam_runner_api_pb2.TimeDomain.EVENT_TIME
            else PROCESSING_DOMAIN
            for f in families
        }
        self._key_impl = key_coder.get_impl()
        self._coders: dict[tuple[str, str], Any] = {}

    def bind_coder(self, transform_id: str, family_id: str, coder_impl: Any) -> None:
        self._coders[transform_id, family_id] = coder_impl

    def record(self, transform_id: str, family_id: str, timer: Any) -> None:
        nested_key = self._key_impl.encode_nested(timer.user_key)
        store = self._groups.for_key(nested_key)
        ident = _length_prefixed(
            transform_id.encode(),
            family_id.encode(),
            nested_key,
            timer.dynamic_timer_tag.encode(),
            repr(timer.windows[0]).encode(),
        )
        if timer.clear_bit:
            store.delete_timer(ident)
            return
        payload = self._coders[transform_id, family_id].encode_nested(timer)
        store.set_timer(
            ident,
            _length_prefixed(transform_id.encode(), family_id.encode()),
            self._domains[transform_id, family_id],
            timer.fire_timestamp.micros,
            timer.hold_timestamp.micros,
            payload,
        )

    def has_due(self, event_horizon: int, processing_horizon: int) -> bool:
        return self._earliest(event_horizon, processing_horizon) is not None

    def pop_due(self, event_horizon: int, processing_horizon: int):
        found = self._earliest(event_horizon, processing_horizon)
        if found is None:
            return None
        store, stored = found
        store.delete_timer(stored.ident)
        transform_id, family_id = _split_owner(stored.owner)
        timer = self._coders[transform_id, family_id].decode_nested(stored.payload)
        return transform_id, family_id, timer

    def _earliest(self, event_horizon: int, processing_horizon: int):
        best = None
        for _, store in self._groups.opened():
            stored = store.earliest_due(event_horizon, processing_horizon)
            if stored is None:
                continue
            if best is None or (stored.domain, stored.fire) < (
                best[1].domain,
                best[1].fire,
            ):
                best = store, stored
        return best


def _split_owner(owner: bytes) -> tuple[str, str]:
    parts = []
    while owner:
        size = int.from_bytes(owner[:4], "big")
        parts.append(owner[4 : 4 + size].decode())
        owner = owner[4 + size :]
    return parts[0], parts[1]


class DurableStageState:
    """User state and timers of one stateful stage for one micro-batch task."""

    def __init__(
        self,
        groups: KeyGroups,
        side_input_entries,
        families: Iterable[TimerFamily],
        key_coder: Any,
    ) -> None:
        self.groups = groups
        self.servicer = DurableStateServicer(groups, side_input_entries)
        self.timers = DurableTimers(groups, families, key_coder)

    def commit(self) -> list[GroupSummary]:
        return self.groups.commit()

    def abandon(self) -> None:
        self.groups.abandon()

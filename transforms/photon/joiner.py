"""The joiner: per query id, pair each click with its query, once.

``Joiner`` is a stateful DoFn over the tagged union of both streams, keyed by
a *shard* of the query id (``(shard_of(query_id), JoinerEvent)``); each shard
holds the per-query-id state of many query ids. It outputs join
*candidates*: ``JoinedClick``s that still have to win their click id in the
id registry (``registration``) before they may leave the pipeline.

Why shards rather than one key per query id: a runner's cost is per key and
bundle, not per byte. Beam's SDK state cache (the DirectRunner's) sizes every
value it stores by walking all loaded modules' globals, about 2 ms a time,
and each key touched in a bundle is read once and written twice at commit; a
key per query id therefore cost about 7 ms per query. With shards, a bundle
pays that per shard it touches.

State, per shard, one value of plain types: ``(entries, deadlines, gcs,
forgotten_through)``; it lives as long as the job (a shard's entries come and
go with their TTL).

- ``entries``: query id -> a serialized ``JoinerState``: the query once it
  has arrived or been fetched from the event store (the first copy wins;
  later copies are counted duplicates), ``pending`` clicks that came before
  their query, ``seen_click_ids`` (a duplicated click, the same id again, is
  dropped and counted) and ``gc_at``.
- ``deadlines``, ``gcs``: timer slot -> the query ids due in that slot.
- ``forgotten_through``: the latest GC slot that has fired (0 before any):
  entries whose GC time was at most this may have been removed.

Timers, on the watermark, in dynamic families tagged by slot: times are
rounded up to a multiple of ``JoinParams.timer_slot_ms``, so a shard has one
timer per slot however many query ids fall into it.

- ``deadline``: a click that finds no query is buffered, due at
  ``click_time + max_wait_ms``. When its slot fires, the queries of every
  query id with clicks then due are looked up in the event store in one read:
  if found, the query is cached and all pending clicks are joined; if not,
  the due clicks go to ``unjoinable`` with reason ``QUERY_NOT_FOUND`` and
  later ones keep waiting for their own slot.
- ``gc``: a query id's entry lives until ``query_ttl_ms`` past the latest
  event time seen for it (re-armed by every event), then is removed; clicks
  still pending are settled as at their deadline first.

A click is joined the moment both sides are present: at its own arrival if
the query is in state, at the query's arrival if it came first. Joined
clicks carry ``joined_at = max(click time, query time)``, so outputs are
deterministic. Late data needs no special case: a late click joins at once
if its query is cached, and otherwise its deadline slot (already behind the
watermark) fires at the next watermark advance and consults the event store.
A duplicate arriving after its entry was removed is not recognised here, so
each candidate says which acceptance of its click it is (its
``occurrence``), for the id registry to tell a retry from a repeat:

- a click accepted while ``forgotten_through < click_time + query_ttl`` has
  never been accepted before in this state's history: an entry holding it
  would be GC'd at ``click_time + query_ttl`` or later, which has not fired.
  Its occurrence is unset, so every attempt and every copy of the click
  (a retried bundle, a restarted run that meets another copy first)
  registers it alike and is ``ALREADY_MINE``, idempotently, but for a copy
  naming another query id, which the registry token's query digest tells
  apart (``id_registry.occurrence_token``);
- a click accepted later may repeat one the joiner forgot: its occurrence is
  ``gc<forgotten_through>``. A retry of the same bundle, from the same state,
  gives the same; a copy accepted after a later GC gives another, and the
  registry stops it as ``REPEATED``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import apache_beam as beam
from apache_beam import coders
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)

from transforms.millwheel.event_time import to_millis, to_timestamp
from transforms.photon.event_store import METRICS_NAMESPACE, EventStore
from transforms.photon.params import BigtableTarget, JoinParams
from transforms.records.photon_pb2 import (
    ClickEvent,
    JoinedClick,
    JoinerEvent,
    JoinerState,
    QueryEvent,
    UnjoinableClick,
)

UNJOINABLE = "unjoinable"

# (entries, deadlines, gcs, forgotten_through); see the module docstring.
ShardState = tuple[dict[str, bytes], dict[int, list[str]], dict[int, list[str]], int]
_SLOTS = coders.MapCoder(coders.VarIntCoder(), coders.ListCoder(coders.StrUtf8Coder()))
SHARD_STATE_CODER = coders.TupleCoder(
    [
        coders.MapCoder(coders.StrUtf8Coder(), coders.BytesCoder()),
        _SLOTS,
        _SLOTS,
        coders.VarIntCoder(),
    ]
)


def shard_of(query_id: str, shards: int) -> int:
    """The joiner shard of ``query_id``: a hash, so shards fill evenly."""
    digest = hashlib.blake2b(query_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def _empty() -> ShardState:
    return ({}, {}, {}, 0)


def joined(click: ClickEvent, query: QueryEvent, occurrence: str = "") -> JoinedClick:
    """The join of ``click`` and ``query``, stamped with when it became possible."""
    candidate = JoinedClick(
        click=click, query=query, joined_at=max(click.event_time, query.event_time)
    )
    if occurrence:
        candidate.occurrence = occurrence
    return candidate


class Joiner(beam.DoFn):
    """Joins clicks with queries per query id; see the module docstring."""

    STATE = ReadModifyWriteStateSpec("shard", SHARD_STATE_CODER)
    DEADLINE = TimerSpec("deadline", TimeDomain.WATERMARK)
    GC = TimerSpec("gc", TimeDomain.WATERMARK)

    def __init__(self, target: BigtableTarget, params: JoinParams) -> None:
        self._target = target
        self._params = params
        counter = lambda name: Metrics.counter(METRICS_NAMESPACE, name)  # noqa: E731
        self._joined_from_state = counter("joined_from_state")
        self._joined_from_store = counter("joined_from_event_store")
        self._duplicate_clicks = counter("duplicate_clicks")
        self._duplicate_queries = counter("duplicate_queries")
        self._lookups = counter("event_store_lookups")
        self._not_found = counter("unjoinable_query_not_found")

    def setup(self) -> None:
        self._store = EventStore(self._target)

    def teardown(self) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()

    def process(
        self,
        element: tuple[int, JoinerEvent],
        stored=beam.DoFn.StateParam(STATE),
        deadline=beam.DoFn.TimerParam(DEADLINE),
        gc=beam.DoFn.TimerParam(GC),
    ) -> Iterator[JoinedClick]:
        _, event = element
        state: ShardState = stored.read() or _empty()
        if event.WhichOneof("event") == "query":
            query_id = event.query.query_id
            entry = _entry(state, query_id)
            outputs = self._on_query(event.query, entry, state, gc)
        else:
            query_id = event.click.query_id
            entry = _entry(state, query_id)
            outputs = self._on_click(event.click, entry, state, deadline, gc)
        state[0][query_id] = entry.SerializeToString()
        stored.write(state)
        return outputs

    def _on_query(
        self, query: QueryEvent, entry: JoinerState, state: ShardState, gc
    ) -> list:
        self._extend_gc(query.query_id, query.event_time, entry, state, gc)
        if entry.HasField("query"):
            self._duplicate_queries.inc()
            return []
        entry.query.CopyFrom(query)
        return self._join_pending(entry, self._joined_from_state)

    def _on_click(
        self, click: ClickEvent, entry: JoinerState, state: ShardState, deadline, gc
    ) -> list[JoinedClick]:
        if click.click_id in entry.seen_click_ids:
            self._duplicate_clicks.inc()
            return []
        entry.seen_click_ids.append(click.click_id)
        forgotten_through = state[3]
        if forgotten_through >= click.event_time + self._params.query_ttl_ms:
            entry.occurrences[click.click_id] = f"gc{forgotten_through}"
        self._extend_gc(click.query_id, click.event_time, entry, state, gc)
        if entry.HasField("query"):
            self._joined_from_state.inc()
            occurrence = entry.occurrences.get(click.click_id, "")
            return [joined(click, entry.query, occurrence)]
        entry.pending.append(click)
        due = click.event_time + self._params.max_wait_ms
        self._schedule(state[1], due, click.query_id, deadline)
        return []

    @on_timer(DEADLINE)
    def on_deadline(
        self,
        fired_at=beam.DoFn.TimestampParam,
        slot=beam.DoFn.DynamicTimerTagParam,
        stored=beam.DoFn.StateParam(STATE),
        gc=beam.DoFn.TimerParam(GC),
    ) -> Iterator[JoinedClick | beam.pvalue.TaggedOutput]:
        state: ShardState = stored.read() or _empty()
        now_ms = to_millis(fired_at)
        query_ids = dict.fromkeys(state[1].pop(int(slot), ()))
        entries = {q: _entry(state, q) for q in query_ids if q in state[0]}
        outputs = self._resolve(entries, now_ms)
        for query_id, entry in entries.items():
            if entry.HasField("query"):
                # The event store answered: the state caches it for a TTL.
                self._extend_gc(query_id, now_ms, entry, state, gc)
            state[0][query_id] = entry.SerializeToString()
        _store(stored, state)
        return outputs

    @on_timer(GC)
    def on_gc(
        self,
        fired_at=beam.DoFn.TimestampParam,
        slot=beam.DoFn.DynamicTimerTagParam,
        stored=beam.DoFn.StateParam(STATE),
    ) -> Iterator[JoinedClick | beam.pvalue.TaggedOutput]:
        state: ShardState = stored.read() or _empty()
        now_ms = to_millis(fired_at)
        query_ids = dict.fromkeys(state[2].pop(int(slot), ()))
        # An entry whose GC time moved on is listed in a later slot too.
        expired = {
            q: entry
            for q in query_ids
            if q in state[0]
            for entry in [_entry(state, q)]
            if entry.gc_at <= now_ms
        }
        # Every pending deadline is at most the GC time: settle them now.
        outputs = self._resolve(expired, now_ms)
        for query_id in expired:
            del state[0][query_id]
        if expired:
            state = (*state[:3], max(state[3], int(slot)))
        _store(stored, state)
        return outputs

    def _resolve(
        self, entries: dict[str, JoinerState], now_ms: int
    ) -> list[JoinedClick | beam.pvalue.TaggedOutput]:
        """Settle the pending clicks whose deadline is ``now_ms`` or earlier,
        looking up in one read the queries of all ``entries`` that need one."""
        max_wait = self._params.max_wait_ms
        due = {
            query_id: entry
            for query_id, entry in entries.items()
            if any(c.event_time + max_wait <= now_ms for c in entry.pending)
        }
        missing = [q for q, entry in due.items() if not entry.HasField("query")]
        if missing:
            self._lookups.inc(len(missing))
            for query_id, query in self._store.get_many(missing).items():
                due[query_id].query.CopyFrom(query)
        outputs: list[JoinedClick | beam.pvalue.TaggedOutput] = []
        for entry in due.values():
            if entry.HasField("query"):
                outputs.extend(self._join_pending(entry, self._joined_from_store))
                continue
            late = [c for c in entry.pending if c.event_time + max_wait <= now_ms]
            waiting = [c for c in entry.pending if c.event_time + max_wait > now_ms]
            del entry.pending[:]
            entry.pending.extend(waiting)
            self._not_found.inc(len(late))
            outputs.extend(
                beam.pvalue.TaggedOutput(UNJOINABLE, self._not_found_for(c))
                for c in late
            )
        return outputs

    def _join_pending(self, entry: JoinerState, counter) -> list[JoinedClick]:
        outputs = [
            joined(click, entry.query, entry.occurrences.get(click.click_id, ""))
            for click in entry.pending
        ]
        counter.inc(len(outputs))
        del entry.pending[:]
        return outputs

    def _extend_gc(
        self, query_id: str, event_time_ms: int, entry: JoinerState, state, gc
    ) -> None:
        at = event_time_ms + self._params.query_ttl_ms
        if not entry.HasField("gc_at") or at > entry.gc_at:
            entry.gc_at = at
            self._schedule(state[2], at, query_id, gc)

    def _schedule(self, slots: dict[int, list[str]], at_ms: int, query_id, timer):
        """List ``query_id`` in the slot of ``at_ms``, arming the slot's timer
        when the slot is new."""
        size = self._params.timer_slot_ms
        slot = -(-at_ms // size) * size
        listed = slots.get(slot)
        if listed is None:
            slots[slot] = [query_id]
            timer.set(to_timestamp(slot), dynamic_timer_tag=str(slot))
        elif listed[-1] != query_id:
            listed.append(query_id)

    def _not_found_for(self, click: ClickEvent) -> UnjoinableClick:
        return UnjoinableClick(
            click=click,
            reason=UnjoinableClick.QUERY_NOT_FOUND,
            detail=(
                f"query {click.query_id!r} was neither in the joiner's state nor "
                f"in the event store {self._params.max_wait_ms} ms after the click"
            ),
        )


def _entry(state: ShardState, query_id: str) -> JoinerState:
    data = state[0].get(query_id)
    return JoinerState() if data is None else JoinerState.FromString(data)


def _store(stored, state: ShardState) -> None:
    # A shard that has forgotten entries keeps saying so, even when empty.
    if any(state):
        stored.write(state)
    else:
        stored.clear()

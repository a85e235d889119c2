"""The joiner: per query id, pair each click with its query, once.

``Joiner`` is a stateful DoFn keyed by ``query_id`` over the tagged union of
both streams (``(query_id, JoinerEvent)``). It outputs join *candidates*:
``JoinedClick``s that still have to win their click id in the id registry
(``registration``) before they may leave the pipeline.

State, per query id, one ``JoinerState`` value (one read and one write per
event: the runner's state cache charges per access, not per byte):

- ``query``: the query event, once it has arrived (or been fetched from the
  event store). The first copy wins; later copies are counted duplicates.
- ``pending``: clicks that arrived before their query.
- ``seen_click_ids``: ids of every click accepted for the key, so a
  duplicated click (the same click id again) is dropped here and counted.
- ``gc_at``: when the key's state is cleared (see timers).

All of it lives until the ``gc`` timer: ``query_ttl_ms`` past the latest event
time seen for the key, re-armed by every event. The query therefore stays
cached for a TTL after the key's last activity, and after that the event
store serves it.

Timers, on the watermark:

- ``deadline`` (a dynamic family, one per distinct deadline): a click that
  finds no query is buffered with a timer at ``click_time + max_wait_ms``.
  When it fires, the query is looked up in the event store: if found, it is
  cached in state and every pending click is joined; if not, the clicks
  whose deadline has passed go to the ``unjoinable`` output with reason
  ``QUERY_NOT_FOUND``; later ones keep waiting for their own deadline.
- ``gc``: clears the key's state. Clicks still pending then (possible only
  when the two timers coincide) are resolved as at their deadline first.

A click is joined the moment both sides are present: at its own arrival if
the query is in state, at the query's arrival if it came first. Joined
clicks carry ``joined_at = max(click time, query time)``, so outputs are
deterministic. Late data needs no special case: a late click joins at once
if its query is cached, and otherwise its deadline (already behind the
watermark) fires at the next watermark advance and consults the event store.
A duplicate arriving after its key's state was cleared is not recognised
here; the id registry stops it only if another pipeline holds the click.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.coders import ProtoCoder
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


def joined(click: ClickEvent, query: QueryEvent) -> JoinedClick:
    """The join of ``click`` and ``query``, stamped with when it became possible."""
    return JoinedClick(
        click=click, query=query, joined_at=max(click.event_time, query.event_time)
    )


class Joiner(beam.DoFn):
    """Joins clicks with queries per query id; see the module docstring."""

    STATE = ReadModifyWriteStateSpec("state", ProtoCoder(JoinerState))
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
        element: tuple[str, JoinerEvent],
        stored=beam.DoFn.StateParam(STATE),
        deadline=beam.DoFn.TimerParam(DEADLINE),
        gc=beam.DoFn.TimerParam(GC),
    ) -> Iterator[JoinedClick]:
        _, event = element
        state = stored.read() or JoinerState()
        if event.WhichOneof("event") == "query":
            outputs = self._on_query(event.query, state, gc)
        else:
            outputs = self._on_click(event.click, state, deadline, gc)
        stored.write(state)
        return outputs

    def _on_query(self, query: QueryEvent, state: JoinerState, gc) -> list:
        self._extend_gc(query.event_time, state, gc)
        if state.HasField("query"):
            self._duplicate_queries.inc()
            return []
        state.query.CopyFrom(query)
        return self._join_pending(state, self._joined_from_state)

    def _on_click(
        self, click: ClickEvent, state: JoinerState, deadline, gc
    ) -> list[JoinedClick]:
        if click.click_id in state.seen_click_ids:
            self._duplicate_clicks.inc()
            return []
        state.seen_click_ids.append(click.click_id)
        self._extend_gc(click.event_time, state, gc)
        if state.HasField("query"):
            self._joined_from_state.inc()
            return [joined(click, state.query)]
        state.pending.append(click)
        due = click.event_time + self._params.max_wait_ms
        deadline.set(to_timestamp(due), dynamic_timer_tag=str(due))
        return []

    @on_timer(DEADLINE)
    def on_deadline(
        self,
        key=beam.DoFn.KeyParam,
        fired_at=beam.DoFn.TimestampParam,
        stored=beam.DoFn.StateParam(STATE),
        gc=beam.DoFn.TimerParam(GC),
    ) -> Iterator[JoinedClick | beam.pvalue.TaggedOutput]:
        state = stored.read() or JoinerState()
        outputs = self._resolve(key, to_millis(fired_at), state)
        if state.HasField("query"):
            # The event store answered: the state caches it for a TTL.
            self._extend_gc(to_millis(fired_at), state, gc)
        stored.write(state)
        return outputs

    @on_timer(GC)
    def on_gc(
        self,
        key=beam.DoFn.KeyParam,
        fired_at=beam.DoFn.TimestampParam,
        stored=beam.DoFn.StateParam(STATE),
    ) -> Iterator[JoinedClick | beam.pvalue.TaggedOutput]:
        state = stored.read() or JoinerState()
        stored.clear()
        # Every pending deadline is at most the GC time: settle them now.
        return self._resolve(key, to_millis(fired_at), state)

    def _resolve(
        self, key: str, now_ms: int, state: JoinerState
    ) -> list[JoinedClick | beam.pvalue.TaggedOutput]:
        """Settle the pending clicks whose deadline is ``now_ms`` or earlier."""
        max_wait = self._params.max_wait_ms
        if not any(c.event_time + max_wait <= now_ms for c in state.pending):
            return []  # settled by an earlier deadline of the same key
        if not state.HasField("query"):
            self._lookups.inc()
            found = self._store.get(key)
            if found is not None:
                state.query.CopyFrom(found)
        if state.HasField("query"):
            return self._join_pending(state, self._joined_from_store)
        due = [c for c in state.pending if c.event_time + max_wait <= now_ms]
        waiting = [c for c in state.pending if c.event_time + max_wait > now_ms]
        del state.pending[:]
        state.pending.extend(waiting)
        self._not_found.inc(len(due))
        return [
            beam.pvalue.TaggedOutput(UNJOINABLE, self._not_found_for(c)) for c in due
        ]

    def _join_pending(self, state: JoinerState, counter) -> list[JoinedClick]:
        outputs = [joined(click, state.query) for click in state.pending]
        counter.inc(len(outputs))
        del state.pending[:]
        return outputs

    def _extend_gc(self, event_time_ms: int, state: JoinerState, gc) -> None:
        # A plain timer moves when set again, so only ever move it later.
        at = event_time_ms + self._params.query_ttl_ms
        if not state.HasField("gc_at") or at > state.gc_at:
            state.gc_at = at
            gc.set(to_timestamp(at))

    def _not_found_for(self, click: ClickEvent) -> UnjoinableClick:
        return UnjoinableClick(
            click=click,
            reason=UnjoinableClick.QUERY_NOT_FOUND,
            detail=(
                f"query {click.query_id!r} was neither in the joiner's state nor "
                f"in the event store {self._params.max_wait_ms} ms after the click"
            ),
        )

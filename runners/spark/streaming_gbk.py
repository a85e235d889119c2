"""GroupByKey in streaming: panes across micro-batches, trigger state durable.

Beam's default trigger over non-merging windows (most GroupByKeys, and
every lifted ``CombinePerKey`` without a trigger) is grouped by
:class:`~runners.spark.watermark_panes.WatermarkPanes`, with its state as
rows. Every other windowing strategy goes through Beam's general trigger
driver (:class:`TriggerDriverPanes`): each key's trigger state (buffered
values, pane indexes, trigger progress, watermark holds and trigger timers)
is Beam's ``InMemoryUnmergedState``, saved in the key's group between
batches, so triggers (early, on-time and late panes), accumulation modes,
allowed lateness and merging windows behave as that driver defines them,
batch after batch. The earliest event-time and processing-time trigger
timers of a key are rows of the group's timer table, so a batch wakes only
the keys with a due timer; the key's earliest pane hold holds the stage's
output watermark. Once a window has expired (the watermark is past its end
plus the allowed lateness), what it still buffers unemitted goes out in a
final pane and its trigger state is forgotten (``TriggerDriverPanes._expire``;
Beam's Python driver keeps both, and the window's watermark hold, for ever).

Event-time triggers fire once the input watermark has passed them (the same
strict rule as user timers); processing-time triggers at the batch's logged
processing time. Elements of expired windows are dropped, as Beam drops
them, and counted in ``SparkRunner/droppedDueToLateness``.
"""

from __future__ import annotations

import collections
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.transforms import trigger
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from runners.spark.components import context_from_bytes, encode_chunks
from runners.spark.durable_store import EVENT_DOMAIN, PROCESSING_DOMAIN, KeyGroupStore
from runners.spark.metrics import DROPPED_LATE, MetricsSnapshot
from runners.spark.micro_batch_task import TaskSpec
from runners.spark.streaming_state import KeyGroups
from runners.spark.watermark import MAX_MICROS
from runners.spark.watermark_panes import WatermarkPanes, fires_at_watermark_only

# Timer rows of a key: its earliest trigger timer in each domain.
_TIMER_ROWS = {EVENT_DOMAIN: b"gbk-event:", PROCESSING_DOMAIN: b"gbk-processing:"}
_STATE_ROW = b"gbk-state:"
# A key whose own firings keep making new due timers would spin for ever.
_MAX_ROUNDS = 1_000


class _BatchClock:
    """The trigger driver's processing-time clock: the batch's logged time."""

    def __init__(self, micros: int) -> None:
        self._seconds = micros / 1e6

    def time(self) -> float:
        return self._seconds


def _load(store: KeyGroupStore, key: bytes) -> trigger.InMemoryUnmergedState:
    state = trigger.InMemoryUnmergedState()
    chunks = store.read(_STATE_ROW + key)
    if chunks:
        timers, windows, global_state = pickle.loads(chunks[0])
        state.timers.update(timers)
        for window, tags in windows.items():
            state.state[window].update(tags)
        state.global_state.update(global_state)
    return state


def _save(store: KeyGroupStore, key: bytes, state: Any, lateness) -> None:
    store.clear(_STATE_ROW + key)
    windows = {w: dict(tags) for w, tags in state.state.items() if tags}
    timers = {w: t for w, t in state.timers.items() if t}
    if windows or timers or state.global_state:
        blob = (timers, windows, dict(state.global_state))
        store.append(_STATE_ROW + key, pickle.dumps(blob, protocol=5))
    # A window's expiry wakes its key as an event-time timer would.
    expiries = [
        min((w.end + lateness).micros, MAX_MICROS)
        for w in state.get_global_state(trigger.MergeableStateAdapter.WINDOW_IDS, {})
    ]
    earliest = {EVENT_DOMAIN: min(expiries, default=None), PROCESSING_DOMAIN: None}
    for window_timers in timers.values():
        for (_, domain, _), ts in window_timers.items():
            row = EVENT_DOMAIN if domain == TimeDomain.WATERMARK else PROCESSING_DOMAIN
            micros = Timestamp.of(ts).micros
            if earliest[row] is None or micros < earliest[row]:
                earliest[row] = micros
    for domain, fire in earliest.items():
        ident = _TIMER_ROWS[domain] + key
        if fire is None:
            store.delete_timer(ident)
        else:
            store.set_timer(ident, key, domain, fire, MAX_MICROS, b"")
    hold = state.get_earliest_hold()
    store.set_hold(key, hold.micros if hold < MAX_TIMESTAMP else None)


class TriggerDriverPanes:
    """Any windowing strategy, through Beam's general trigger driver with
    each key's trigger state saved in its group between batches."""

    def __init__(self, windowing, batch: TaskSpec, in_coder, groups: KeyGroups):
        self._driver = trigger.create_trigger_driver(
            windowing, False, clock=_BatchClock(batch.processing_time)
        )
        self._batch = batch
        self._groups = groups
        self._key_impl = in_coder.wrapped_value_coder.key_coder().get_impl()
        self._by_key: dict[bytes, list] = collections.defaultdict(list)
        self._keys: dict[bytes, Any] = {}
        self._lateness = windowing.allowed_lateness
        self._accumulating = (
            windowing.accumulation_mode == trigger.AccumulationMode.ACCUMULATING
        )
        self._input_wm = Timestamp(micros=batch.input_watermark)
        self.dropped_late = 0

    def add(self, wv) -> None:
        """Buffers one input element."""
        # Beam's driver drops these windows without saying so: count them.
        self.dropped_late += sum(
            1 for w in wv.windows if self._input_wm > w.end + self._lateness
        )
        key, value = wv.value
        nested = self._key_impl.encode_nested(key)
        self._keys.setdefault(nested, key)
        self._by_key[nested].append(wv.with_value(value))

    def fire(self) -> list:
        """The batch's panes, key by key: due timers, new values, then any
        timer that became due meanwhile."""
        batch = self._batch
        horizon = Timestamp(micros=batch.event_horizon())
        processing = Timestamp(micros=batch.processing_time)
        due: set[bytes] = set(self._by_key)
        for _, store in self._groups.opened():
            due.update(store.due_owners(horizon.micros, batch.processing_time))
        panes = []
        for nested in sorted(due):
            key = self._keys.get(nested)
            if key is None:
                key = self._key_impl.decode_nested(nested)
            store = self._groups.for_key(nested)
            state = _load(store, nested)
            values = self._by_key.get(nested, ())
            for pane in _fire(self._driver, state, values, batch, horizon, processing):
                panes.append(pane.with_value((key, pane.value)))
            for pane in self._expire(state):
                panes.append(pane.with_value((key, pane.value)))
            _save(store, nested, state, self._lateness)
        return panes

    def _expire(self, state: trigger.InMemoryUnmergedState) -> list:
        """Last panes of the key's expired windows; then their state goes.

        A window expires once the input watermark has passed its end plus
        the allowed lateness: no element can reach it any more. Elements it
        still buffers that no pane has emitted yet (a ``Never`` trigger, an
        ``AfterCount`` never reached, what arrived after the last firing of
        a discarding trigger) go out in a final pane, as Beam's model and
        its Java runners define it. Beam's Python driver keeps such a window,
        and its watermark hold, for ever. (An accumulating window that has
        fired already is not emitted again: its buffer cannot tell what is
        new since its last pane.)
        """
        adapter = trigger.MergeableStateAdapter(state)
        driver = self._driver
        panes, expired = [], False
        for window in adapter.known_windows():
            expiry = window.end + self._lateness
            if not self._input_wm > expiry:
                continue
            expired = True
            unemitted = adapter.get_state(window, driver.ELEMENTS) and not (
                adapter.get_state(window, driver.TOMBSTONE)
                or (self._accumulating and adapter.get_state(window, driver.INDEX))
            )
            if unemitted:
                # On time when the window's end is its expiry (no lateness).
                on_time = expiry == window.end
                panes.append(driver._output(window, True, adapter, expiry, on_time))
            for window_id in adapter.window_ids.pop(window):
                state.state.pop(window_id, None)
                state.timers.pop(window_id, None)
        if expired:
            adapter._persist_window_ids()
        return panes


def group_streaming(
    components: bytes,
    input_coder_id: str,
    output_coder_id: str,
    windowing_strategy_id: str,
    batch: TaskSpec,
    records: Iterable[tuple[int, bytes]],
) -> Iterator[tuple[int, Any]]:
    """Spark ``mapPartitions`` body: ``records`` are (key group, encoded
    element), with an empty element for a group woken by a due timer.
    Yields ``(0, encoded chunk)`` outputs, then ``(-1, MetricsSnapshot)`` if
    it dropped late data and ``(-1, GroupSummary)`` per group touched."""
    context = context_from_bytes(components)
    in_coder = context.coders[input_coder_id]
    in_impl = in_coder.get_impl()
    windowing = context.windowing_strategies.get_by_id(windowing_strategy_id)
    groups = KeyGroups(batch.state_dir, batch.stage, batch.key_groups, batch.batch)
    panes_of = (
        WatermarkPanes if fires_at_watermark_only(windowing) else TriggerDriverPanes
    )
    grouping = panes_of(windowing, batch, in_coder, groups)
    try:
        for group, raw in records:
            groups.group(group)
            if raw:
                grouping.add(in_impl.decode(raw))
        panes = grouping.fire()
        raised = batch.with_early_watermark()
        if raised is not batch:
            # The source upstream has moved the watermark past what the
            # batch's elements were judged by (they arrived before it
            # moved): now fire what that move makes due.
            panes += panes_of(windowing, raised, in_coder, groups).fire()
        out_impl = context.coders[output_coder_id].get_impl()
        for chunk in encode_chunks(panes, out_impl):
            yield 0, chunk
        summaries = groups.commit()
    except BaseException:
        groups.abandon()
        raise
    if grouping.dropped_late:
        metrics = MetricsSnapshot()
        metrics.add_counter(batch.stage, DROPPED_LATE, grouping.dropped_late)
        yield -1, metrics
    for summary in summaries:
        yield -1, summary


def _fire(driver, state, values, batch: TaskSpec, horizon, processing):
    """One key's due trigger timers, then its new values, then any timer that
    became due meanwhile, until none is."""
    input_wm = Timestamp(micros=batch.input_watermark)
    output_wm = Timestamp(micros=batch.output_watermark)
    yield from _fire_timers(driver, state, horizon, processing, input_wm)
    if values:
        yield from driver.process_elements(state, values, output_wm, input_wm)
    for _ in range(_MAX_ROUNDS):
        fired = list(_fire_timers(driver, state, horizon, processing, input_wm))
        if not fired:
            return
        yield from fired
    raise RuntimeError("a trigger keeps firing within one batch")


def _fire_timers(driver, state, horizon, processing, input_wm):
    expired, _ = state.get_timers(
        clear=True, watermark=horizon, processing_time=processing
    )
    for window, (name, domain, ts, _tag) in expired:
        yield from driver.process_timer(window, name, domain, ts, state, input_wm)

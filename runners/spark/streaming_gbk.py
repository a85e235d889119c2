"""GroupByKey in streaming: panes across micro-batches, trigger state durable.

Each key's trigger state (buffered values, pane indexes, trigger progress,
watermark holds and trigger timers) is Beam's ``InMemoryUnmergedState``,
saved in the key's group between batches, so triggers (early, on-time and
late panes), accumulation modes, allowed lateness and merging windows behave
as Beam's general trigger driver defines them, batch after batch. The
earliest event-time and processing-time trigger timers of a key are rows of
the group's timer table, so a batch wakes only the keys with a due timer;
the key's earliest pane hold holds the stage's output watermark.

Event-time triggers fire once the input watermark has passed them (the same
strict rule as user timers); processing-time triggers at the batch's logged
processing time.
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
from runners.spark.micro_batch_task import TaskSpec
from runners.spark.streaming_state import KeyGroups
from runners.spark.watermark import MAX_MICROS

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


def _save(store: KeyGroupStore, key: bytes, state: Any) -> None:
    store.clear(_STATE_ROW + key)
    windows = {w: dict(tags) for w, tags in state.state.items() if tags}
    timers = {w: t for w, t in state.timers.items() if t}
    if windows or timers or state.global_state:
        blob = (timers, windows, dict(state.global_state))
        store.append(_STATE_ROW + key, pickle.dumps(blob, protocol=5))
    earliest = {EVENT_DOMAIN: None, PROCESSING_DOMAIN: None}
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
    Yields ``(0, encoded chunk)`` outputs, then ``(-1, GroupSummary)`` per
    group touched."""
    context = context_from_bytes(components)
    in_coder = context.coders[input_coder_id]
    in_impl = in_coder.get_impl()
    key_impl = in_coder.wrapped_value_coder.key_coder().get_impl()
    windowing = context.windowing_strategies.get_by_id(windowing_strategy_id)
    driver = trigger.create_trigger_driver(
        windowing, False, clock=_BatchClock(batch.processing_time)
    )
    groups = KeyGroups(batch.state_dir, batch.stage, batch.key_groups, batch.batch)
    by_key: dict[bytes, list] = collections.defaultdict(list)
    decoded_keys: dict[bytes, Any] = {}
    try:
        for group, raw in records:
            store = groups.group(group)
            if not raw:
                continue
            wv = in_impl.decode(raw)
            key, value = wv.value
            nested = key_impl.encode_nested(key)
            decoded_keys.setdefault(nested, key)
            by_key[nested].append(wv.with_value(value))
        horizon = Timestamp(micros=batch.event_horizon())
        processing = Timestamp(micros=batch.processing_time)
        due: set[bytes] = set(by_key)
        for _, store in groups.opened():
            due.update(store.due_owners(horizon.micros, batch.processing_time))
        panes = []
        for nested in sorted(due):
            key = decoded_keys.get(nested)
            if key is None:
                key = key_impl.decode_nested(nested)
            store = groups.for_key(nested)
            state = _load(store, nested)
            for pane in _fire(
                driver, state, by_key.get(nested, ()), batch, horizon, processing
            ):
                panes.append(pane.with_value((key, pane.value)))
            _save(store, nested, state)
        out_impl = context.coders[output_coder_id].get_impl()
        for chunk in encode_chunks(panes, out_impl):
            yield 0, chunk
        summaries = groups.commit()
    except BaseException:
        groups.abandon()
        raise
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

"""GroupByKey in streaming for Beam's default trigger over non-merging windows.

That is most streaming GroupByKeys and every lifted ``CombinePerKey`` that
sets no trigger: one ON_TIME pane per key and window once the watermark
passes the window's end, then a LATE pane for each element that arrives
within the allowed lateness. :class:`WatermarkPanes` produces the panes
Beam's ``GeneralTriggerDriver`` produces for that case (pane indexes,
timing, output timestamps and holds, accumulation modes), with the state as
rows of the key group instead of one pickled trigger state per key, which
costs about a millisecond per key per batch in Beam's driver and is never
garbage-collected there. Rows of one (key, window) cell:

- ``values``: the values not yet discarded, nested-encoded, one chunk per
  batch that added some; read only when a pane fires.
- ``pane``: panes fired so far and their non-speculative count, written when
  a pane fires.
- a hold (the ``holds`` table) at the output timestamp of the pending pane,
  set by elements and cleared by the on-time pane, so the stage's output
  watermark waits for the pane.
- the end-of-window timer (event time, at the window's end: it fires once
  the input watermark has passed the end, the rule of every timer here),
  set by an element that arrives before the end.
- the expiry timer at end + allowed lateness: after it, no element of the
  window is accepted any more, so every row of the cell is deleted. It fires
  after the end-of-window timer of the same cell in a batch where both are
  due.

Late elements beyond the allowed lateness are dropped, as Beam's driver
drops them, and counted (``dropped_late``).
"""

from __future__ import annotations

import collections
import pickle
from dataclasses import dataclass

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.transforms import trigger
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import Timestamp

from runners.spark.durable_store import EVENT_DOMAIN, KeyGroupStore, StoredTimer
from runners.spark.micro_batch_task import TaskSpec
from runners.spark.streaming_state import KeyGroups
from runners.spark.watermark import MAX_MICROS

_VALUES = b"wp-values:"
_PANE = b"wp-pane:"
_END = b"wp-end:"
_EXPIRY = b"wp-expiry:"


def fires_at_watermark_only(windowing) -> bool:
    """Whether :class:`WatermarkPanes` groups this windowing strategy."""
    return (
        isinstance(windowing.triggerfn, trigger.DefaultTrigger)
        and not windowing.windowfn.is_merging()
    )


@dataclass(frozen=True)
class _PaneCount:
    """Panes fired for a cell, and how many of them were not speculative."""

    fired: int = 0
    nonspeculative: int = 0


class WatermarkPanes:
    """One task's grouping of one batch: add the elements, then ``fire``."""

    def __init__(self, windowing, batch: TaskSpec, in_coder, groups: KeyGroups):
        self._batch = batch
        self._groups = groups
        self._lateness = windowing.allowed_lateness
        self._discarding = (
            windowing.accumulation_mode == trigger.AccumulationMode.DISCARDING
        )
        self._combiner = TimestampCombiner.get_impl(
            windowing.timestamp_combiner, windowing.windowfn
        )
        kv_coder = in_coder.wrapped_value_coder
        self._key_impl = kv_coder.key_coder().get_impl()
        self._value_impl = kv_coder.value_coder().get_impl()
        self._window_impl = in_coder.window_coder.get_impl()
        self._input_wm = Timestamp(micros=batch.input_watermark)
        self._output_wm = Timestamp(micros=batch.output_watermark)
        # (nested key, encoded window) -> [(value, timestamp)], in input order.
        self._pending: dict[tuple[bytes, bytes], list] = collections.defaultdict(list)
        self._windows: dict[bytes, object] = {}
        self._keys: dict[bytes, object] = {}
        self.dropped_late = 0

    def add(self, wv) -> None:
        """Buffers one input element, dropping its expired windows."""
        key, value = wv.value
        nested = self._key_impl.encode_nested(key)
        self._keys.setdefault(nested, key)
        for window in wv.windows:
            if self._input_wm > window.end + self._lateness:
                self.dropped_late += 1
                continue
            encoded = self._window_impl.encode_nested(window)
            self._windows.setdefault(encoded, window)
            self._pending[nested, encoded].append((value, wv.timestamp))

    def fire(self) -> list:
        """The batch's panes: due timers first, then the new elements (what
        Beam's driver does key by key; keys do not interact)."""
        panes = []
        horizon = self._batch.event_horizon()
        for _, store in self._groups.opened():
            due = store.due_event_timers(horizon)
            for timer in due:
                if timer.ident.startswith(_END):
                    panes.append(self._on_time(store, timer))
            for timer in due:
                if timer.ident.startswith(_EXPIRY):
                    self._expire(store, timer.owner + timer.payload)
        for (nested, encoded), entries in self._pending.items():
            pane = self._add(nested, encoded, entries)
            if pane is not None:
                panes.append(pane)
        return panes

    # -- firing ----------------------------------------------------------------

    def _on_time(self, store: KeyGroupStore, timer: StoredTimer):
        cell = timer.owner + timer.payload
        store.delete_timer(timer.ident)
        window = self._window(timer.payload)
        return self._output(
            store, timer.owner, cell, window, Timestamp(micros=timer.fire), True
        )

    def _add(self, nested: bytes, encoded: bytes, entries: list):
        store = self._groups.for_key(nested)
        window = self._windows[encoded]
        cell = nested + encoded
        output_time = self._combiner.merge(
            window,
            (
                t
                for t in (
                    self._combiner.assign_output_time(window, ts) for _, ts in entries
                )
                if t >= self._output_wm
            ),
        )
        if output_time is not None:
            held = store.hold(_PANE + cell)
            if held is not None:
                output_time = self._combiner.combine(
                    Timestamp(micros=held), output_time
                )
            store.set_hold(_PANE + cell, output_time.micros)
        chunk = b"".join(self._value_impl.encode_nested(v) for v, _ in entries)
        store.append(_VALUES + cell, chunk)
        end = window.end.micros
        expiry = min(end + self._lateness.micros, MAX_MICROS)
        store.set_timer(
            _EXPIRY + cell, nested, EVENT_DOMAIN, expiry, MAX_MICROS, encoded
        )
        if self._input_wm >= window.end:
            # The default trigger fires at once for an element behind the
            # watermark (and clears its end-of-window timer).
            store.delete_timer(_END + cell)
            return self._output(store, nested, cell, window, self._output_wm, False)
        store.set_timer(_END + cell, nested, EVENT_DOMAIN, end, MAX_MICROS, encoded)
        return None

    def _output(self, store, nested, cell, window, fired_at, maybe_on_time):
        """One pane of ``cell``, as Beam's ``GeneralTriggerDriver._output``
        makes it for a trigger that never finishes."""
        count = self._pane_count(store, cell)
        if fired_at <= window.max_timestamp():
            if count.nonspeculative:
                nonspeculative = count.nonspeculative
                count = _PaneCount(count.fired, count.nonspeculative + 1)
            else:
                nonspeculative = -1
            timing = windowed_value.PaneInfoTiming.EARLY
        else:
            nonspeculative = count.nonspeculative
            count = _PaneCount(count.fired, count.nonspeculative + 1)
            timing = (
                windowed_value.PaneInfoTiming.ON_TIME
                if maybe_on_time and nonspeculative == 0
                else windowed_value.PaneInfoTiming.LATE
            )
        pane = windowed_value.PaneInfo(
            count.fired == 0, False, timing, count.fired, nonspeculative
        )
        store.clear(_PANE + cell)
        store.append(
            _PANE + cell, pickle.dumps((count.fired + 1, count.nonspeculative))
        )
        values = self._values(store, cell)
        if self._discarding:
            store.clear(_VALUES + cell)
        held = store.hold(_PANE + cell)
        if held is None:
            timestamp = window.max_timestamp()
        else:
            timestamp = Timestamp(micros=held)
            if fired_at >= window.end:
                store.set_hold(_PANE + cell, None)
        key = self._keys.get(nested)
        if key is None:
            key = self._keys[nested] = self._key_impl.decode_nested(nested)
        return windowed_value.WindowedValue((key, values), timestamp, (window,), pane)

    def _expire(self, store: KeyGroupStore, cell: bytes) -> None:
        store.clear(_VALUES + cell)
        store.clear(_PANE + cell)
        store.set_hold(_PANE + cell, None)
        store.delete_timer(_END + cell)
        store.delete_timer(_EXPIRY + cell)

    # -- rows --------------------------------------------------------------------

    def _pane_count(self, store: KeyGroupStore, cell: bytes) -> _PaneCount:
        chunks = store.read(_PANE + cell)
        return _PaneCount(*pickle.loads(chunks[0])) if chunks else _PaneCount()

    def _values(self, store: KeyGroupStore, cell: bytes) -> list:
        stream = create_InputStream(b"".join(store.read(_VALUES + cell)))
        values = []
        while stream.size() > 0:
            values.append(self._value_impl.decode_from_stream(stream, True))
        return values

    def _window(self, encoded: bytes):
        window = self._windows.get(encoded)
        if window is None:
            window = self._windows[encoded] = self._window_impl.decode_nested(encoded)
        return window

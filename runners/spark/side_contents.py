"""What a side input holds in streaming, batch after batch.

Beam serves a side input that a trigger fires more than once as the latest
firing of each window ("if the side input has multiple trigger firings,
Beam uses the value from the latest trigger firing"): the slowly-updating
side input, a ``PeriodicImpulse`` in the global window fired again and
again by a trigger of its own, reads as its newest value, not as every
value it ever had. An element's pane says which kind it is:

- no trigger fired it (its pane is Beam's default, timing UNKNOWN: what a
  source or a ``Map`` over a windowed stream emits): it belongs to the
  PCollection for good, and is kept from batch to batch;
- a trigger fired it (a GroupByKey's or a Combine's pane, and whatever a
  ParDo makes of it): per window, the view holds the latest firing, the
  fired elements of the latest batch that fired into the window. The panes
  of all keys that fire in one batch make one firing, so a table reloaded
  on each firing, one key a row, reads whole, new keys included.

A batch's fired elements of a window whose pane indexes are all among those
the view holds continue those panes rather than replace them: a splittable
DoFn between the firing and the side input may emit one pane's elements
over several batches, and another key may reach the same pane later. The
latest pane is the view under either accumulation mode: an accumulating
trigger's pane holds every element so far, a discarding one's the new ones.

A window goes, elements and firing, once no main-input element can read it
any more (`side_expiry.py`). The checkpoint stores each batch's unfired
elements apart, so the contents know which windows each batch stored: a
batch's file is rewritten without the windows that went, and deleted with
the last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apache_beam.utils.windowed_value import PaneInfoTiming, WindowedValue

from runners.spark.components import decode_all, encode_chunks
from runners.spark.side_expiry import Horizon

# Per encoded window, the latest firing: its pane indexes and its elements.
Firings = dict[bytes, tuple[frozenset[int], list[bytes]]]
# Per encoded window, the chunks of its elements that no trigger fired, each
# with the batch that stored it.
Unfired = dict[bytes, list[tuple[int, bytes]]]


class SideContents:
    """The side-input elements of the batches committed so far, as the
    views read them: every element no trigger fired, and the latest firing
    of each window, in the windows that have not expired."""

    def __init__(self) -> None:
        # PCollection -> its elements that no trigger fired.
        self._unfired: dict[str, Unfired] = {}
        # PCollection -> its windows' latest firings.
        self._firings: dict[str, Firings] = {}
        # Batch -> the (PCollection, encoded window) of the unfired elements
        # it stored that are held still.
        self._stored: dict[int, set[tuple[str, bytes]]] = {}
        # Batches that `expire` took windows from since `shrunk`.
        self._shrunk: set[int] = set()

    def fold(
        self,
        batch: int,
        produced: dict[str, list[bytes]],
        coder_of: Callable[[str], Any],
    ) -> bool:
        """Adds one batch's side-input chunks (``coder_of`` gives a
        PCollection's windowed-value coder). Returns whether a window's
        latest firing changed: the elements no trigger fired only add to
        what the batch stores (`stored`), a firing replaces the stored
        firings."""
        changed = False
        for pc, chunks in produced.items():
            unfired, fired = _split(chunks, coder_of(pc))
            held = self._unfired.setdefault(pc, {})
            for window, window_chunks in unfired.items():
                held.setdefault(window, []).extend((batch, c) for c in window_chunks)
                self._stored.setdefault(batch, set()).add((pc, window))
            if fired:
                changed = True
                _follow(self._firings.setdefault(pc, {}), fired)
        return changed

    def expire(self, horizons: dict[str, Horizon]) -> bool:
        """Drops the windows that no main-input element can read any more,
        per side PCollection (`side_expiry.py`). Returns whether a firing
        went: the stored firings are then rewritten."""
        gone: set[tuple[str, bytes]] = set()
        fired_gone = False
        for pc, horizon in horizons.items():
            gone.update(
                (pc, w) for w in _drop_passed(self._unfired.get(pc, {}), horizon)
            )
            fired_gone |= bool(_drop_passed(self._firings.get(pc, {}), horizon))
        for batch, held in self._stored.items():
            if held & gone:
                held -= gone
                self._shrunk.add(batch)
        return fired_gone

    def stored(self, batch: int) -> dict[str, list[bytes]]:
        """What of batch ``batch``'s unfired elements is held still, as the
        checkpoint stores it: PCollection -> chunks."""
        kept: dict[str, list[bytes]] = {}
        for pc, window in sorted(self._stored.get(batch, ())):
            kept.setdefault(pc, []).extend(
                chunk for b, chunk in self._unfired[pc][window] if b == batch
            )
        return kept

    def shrunk(self) -> dict[int, dict[str, list[bytes]]]:
        """The batches `expire` took windows from since the last call, each
        with what it stores now (nothing once all its windows went: then
        it is forgotten here)."""
        shrunk = {batch: self.stored(batch) for batch in sorted(self._shrunk)}
        for batch, kept in shrunk.items():
            if not kept:
                del self._stored[batch]
        self._shrunk.clear()
        return shrunk

    def chunks(self) -> dict[str, list[bytes]]:
        """PCollection -> the chunks its side inputs read."""
        views = {
            pc: [chunk for held in windows.values() for _, chunk in held]
            for pc, windows in self._unfired.items()
        }
        for pc, firings in self._firings.items():
            for _, elements in firings.values():
                views.setdefault(pc, []).extend(elements)
        return views

    def firings(self) -> dict[str, Firings]:
        """The latest firing of every window, as the checkpoint stores it."""
        return self._firings

    @classmethod
    def restored(
        cls,
        batches: dict[int, dict[str, list[bytes]]],
        firings: dict[str, Firings] | None,
        coder_of: Callable[[str], Any],
    ) -> SideContents:
        """The contents the checkpoint stored: each batch's unfired elements
        and the latest firings as of the last commit. A checkpoint written
        before firings were stored apart has fired elements among its
        batches' own: folded batch by batch, they leave the latest firing."""
        contents = cls()
        for batch, produced in sorted(batches.items()):
            contents.fold(batch, produced, coder_of)
        if firings is not None:
            contents._firings = firings
        return contents


def _split(chunks: list[bytes], coder: Any) -> tuple[dict[bytes, list[bytes]], Firings]:
    """``chunks`` as, per window, the chunks of the elements no trigger
    fired, and the fired elements with their pane indexes."""
    impl, window_coder = coder.get_impl(), coder.window_coder
    unfired: dict[bytes, list[bytes]] = {}
    by_window: dict[bytes, list[WindowedValue]] = {}
    fired: dict[bytes, tuple[set[int], list[WindowedValue]]] = {}
    for chunk in chunks:
        values = list(decode_all(chunk, impl))
        windows = {w for v in values for w in v.windows}
        if len(windows) == 1 and not any(map(_fired, values)):
            # Most side inputs fire no trigger, and a chunk of one window
            # stays as it came.
            unfired.setdefault(window_coder.encode(windows.pop()), []).append(chunk)
            continue
        for value in values:
            for window in value.windows:
                one = WindowedValue(
                    value.value, value.timestamp, (window,), value.pane_info
                )
                encoded = window_coder.encode(window)
                if not _fired(value):
                    by_window.setdefault(encoded, []).append(one)
                    continue
                indexes, elements = fired.setdefault(encoded, (set(), []))
                indexes.add(value.pane_info.index)
                elements.append(one)
    for window, values in by_window.items():
        unfired.setdefault(window, []).extend(encode_chunks(values, impl))
    return unfired, {
        window: (frozenset(indexes), list(encode_chunks(elements, impl)))
        for window, (indexes, elements) in fired.items()
    }


def _drop_passed(windows: dict[bytes, Any], horizon: Horizon) -> list[bytes]:
    """Deletes the expired windows of ``windows``; returns them."""
    passed = [window for window in windows if horizon.passed(window)]
    for window in passed:
        del windows[window]
    return passed


def _follow(firings: Firings, fired: Firings) -> None:
    """Moves each window of ``firings`` on to the batch's ``fired``
    elements: they replace the window's firing, or join it when their pane
    indexes are all the firing's own (the same panes, continued)."""
    for window, (indexes, elements) in fired.items():
        held = firings.get(window)
        if held is not None and indexes <= held[0]:
            held[1].extend(elements)
        else:
            firings[window] = (indexes, elements)


def _fired(value: WindowedValue) -> bool:
    """Whether a trigger fired ``value``: a firing stamps its pane early, on
    time or late."""
    return value.pane_info.timing != PaneInfoTiming.UNKNOWN

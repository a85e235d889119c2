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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from apache_beam.utils.windowed_value import PaneInfoTiming, WindowedValue

from runners.spark.components import decode_all, encode_chunks

# Per encoded window, the latest firing: its pane indexes and its elements.
Firings = dict[bytes, tuple[frozenset[int], list[bytes]]]


class SideContents:
    """The side-input elements of the batches committed so far, as the
    views read them: every element no trigger fired, and the latest firing
    of each window."""

    def __init__(self) -> None:
        # PCollection -> chunks of its elements that no trigger fired.
        self._unfired: dict[str, list[bytes]] = {}
        # PCollection -> its windows' latest firings.
        self._firings: dict[str, Firings] = {}

    def fold(
        self, produced: dict[str, list[bytes]], coder_of: Callable[[str], Any]
    ) -> tuple[dict[str, list[bytes]], bool]:
        """Adds one batch's side-input chunks (``coder_of`` gives a
        PCollection's windowed-value coder). Returns the batch's elements
        that no trigger fired, which only add to what is stored, and whether
        a window's latest firing changed, which replaces it."""
        unfired_now: dict[str, list[bytes]] = {}
        changed = False
        for pc, chunks in produced.items():
            unfired, fired = _split(chunks, coder_of(pc))
            if unfired:
                unfired_now[pc] = unfired
                self._unfired.setdefault(pc, []).extend(unfired)
            if fired:
                changed = True
                _follow(self._firings.setdefault(pc, {}), fired)
        return unfired_now, changed

    def chunks(self) -> dict[str, list[bytes]]:
        """PCollection -> the chunks its side inputs read."""
        views = {pc: list(chunks) for pc, chunks in self._unfired.items()}
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
        batches: Iterable[dict[str, list[bytes]]],
        firings: dict[str, Firings] | None,
        coder_of: Callable[[str], Any],
    ) -> SideContents:
        """The contents the checkpoint stored: each batch's unfired elements
        and the latest firings as of the last commit. A checkpoint written
        before firings were stored apart has fired elements among its
        batches' own: folded batch by batch, they leave the latest firing."""
        contents = cls()
        for produced in batches:
            contents.fold(produced, coder_of)
        if firings is not None:
            contents._firings = firings
        return contents


def _split(chunks: list[bytes], coder: Any) -> tuple[list[bytes], Firings]:
    """``chunks`` as the chunks of the elements no trigger fired, and per
    window, the fired elements and their pane indexes."""
    impl, window_coder = coder.get_impl(), coder.window_coder
    unfired: list[bytes] = []
    fired: dict[bytes, tuple[set[int], list[WindowedValue]]] = {}
    for chunk in chunks:
        values = list(decode_all(chunk, impl))
        if not any(map(_fired, values)):
            # Most side inputs fire no trigger: their chunks stay as they came.
            unfired.append(chunk)
            continue
        unfired.extend(encode_chunks((v for v in values if not _fired(v)), impl))
        for value in filter(_fired, values):
            for window in value.windows:
                indexes, elements = fired.setdefault(
                    window_coder.encode(window), (set(), [])
                )
                indexes.add(value.pane_info.index)
                elements.append(
                    WindowedValue(
                        value.value, value.timestamp, (window,), value.pane_info
                    )
                )
    return unfired, {
        window: (frozenset(indexes), list(encode_chunks(elements, impl)))
        for window, (indexes, elements) in fired.items()
    }


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

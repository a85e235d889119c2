"""Counts of the windows a query has not emitted yet, kept as one state cell.

`WindowCounter` appends each (window start, count) partial to a bag, which
is cheap per search. Reading that bag at every window's timer, though, costs
one decode per pending window: in a batch run every window of a query is
pending when the first timer fires, so a query with W windows paid O(W²)
bag reads and rewrites. Each firing therefore folds the bag into
`PendingWindows`, two sorted integer arrays serialised as one bytes value, and
takes the due windows off the front by bisection.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from transforms.zeitgeist.count_sums import add_counts


class PendingWindows:
    """Window starts (ms) and their counts, sorted by start."""

    def __init__(self, data: bytes | None = None) -> None:
        self._starts = array("q")
        self._counts = array("q")
        if data:
            half = len(data) // 2
            self._starts.frombytes(data[:half])
            self._counts.frombytes(data[half:])
            if sys.byteorder != "little":
                self._starts.byteswap()
                self._counts.byteswap()

    def __len__(self) -> int:
        return len(self._starts)

    def __contains__(self, start: int) -> bool:
        at = bisect_left(self._starts, start)
        return at < len(self._starts) and self._starts[at] == start

    def add(self, partials: Iterable[tuple[int, int]]) -> None:
        """Adds (start, count) partials; counts of one window are summed."""
        partials = list(partials)
        if not partials:
            return
        merged = dict(zip(self._starts, self._counts, strict=True))
        for start, count in partials:
            merged[start] = add_counts(merged.get(start, 0), count)
        starts = sorted(merged)
        self._starts = array("q", starts)
        self._counts = array("q", (merged[s] for s in starts))

    def take_through(self, last_start: int) -> dict[int, int]:
        """Removes and returns the windows starting at or before `last_start`."""
        cut = bisect_right(self._starts, last_start)
        due = dict(zip(self._starts[:cut], self._counts[:cut], strict=True))
        del self._starts[:cut]
        del self._counts[:cut]
        return due

    def to_bytes(self) -> bytes:
        """The state value: starts then counts, little-endian int64."""
        starts, counts = self._starts, self._counts
        if sys.byteorder != "little":
            starts, counts = array("q", starts), array("q", counts)
            starts.byteswap()
            counts.byteswap()
        return starts.tobytes() + counts.tobytes()

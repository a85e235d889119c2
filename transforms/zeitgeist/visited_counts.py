"""Where a query's counts have been: a bounded set of the counts it has had.

The detector asks one question of it: how far is this window's count from
every count the query has had before, as a share of the range they span?
A count in a part of the query's range where it has never been (a CPU at
0.6 after weeks at 0.13 with daily peaks at 1.5) is new for the query even
when it breaks no record and its deviation is below the lone window's bar.

The set is a bitmap over bins of the count axis, each ``2**e`` searches
wide: bin ``count >> e``. e starts at 0 (bins of one search: exact) and
grows by one whenever the counts seen would span `MAX_BINS` bins or more,
merging each pair of bins into one. So the state stays within
``MAX_BINS / 8`` bytes, and a bin is at most about 1/500 of the range the
counts span: distances are exact to within a bin, well below the shares of
the range the detector asks about. Kept in `DetectorState`
(`visited_bin_log2`, `visited_base`, `visited_bins`): the bin width's
exponent, the bin of bit 0 (the lowest bin visited, so bit 0 is always
set), and the bitmap, little-endian.
"""

from typing import NamedTuple

from transforms.records.zeitgeist_pb2 import DetectorState

# Bins at most across the counts seen: 128 bytes of state per query.
MAX_BINS = 1024


class Placement(NamedTuple):
    """Where a count lay among the counts a query had before it (searches,
    to within a bin)."""

    distance: float  # to the nearest count had; 0 in a visited bin
    span: float  # from the lowest count had to the highest


def visit(state: DetectorState, count: int) -> Placement | None:
    """Where `count` lies among the query's visited counts (None before any),
    and the count added to them (in place)."""
    bits = int.from_bytes(state.visited_bins, "little")
    shift = state.visited_bin_log2
    if not bits:
        state.visited_base = count >> shift
        state.visited_bins = b"\x01"
        return None
    base = state.visited_base
    index = (count >> shift) - base
    top = bits.bit_length() - 1
    span = float(top << shift)
    if 0 <= index <= top and bits >> index & 1:
        return Placement(0.0, span)  # the common case: nothing to write
    placement = Placement(float(_bins_to_nearest(bits, index) << shift), span)
    _add(state, bits, base, shift, count)
    return placement


def _bins_to_nearest(bits: int, index: int) -> int:
    """Bins from bin `index` (not set) to the nearest set bin of `bits`."""
    top = bits.bit_length() - 1
    if index < 0:
        return -index  # bit 0 is set
    if index > top:
        return index - top
    below = bits & ((1 << index) - 1)
    above = bits >> (index + 1)
    gaps = []
    if below:
        gaps.append(index - (below.bit_length() - 1))
    if above:
        gaps.append((above & -above).bit_length())
    return min(gaps)


def _add(state: DetectorState, bits: int, base: int, shift: int, count: int) -> None:
    """Set `count`'s bin, widening the bins first if the counts would span
    `MAX_BINS` or more."""
    low = min(base, count >> shift)
    high = max(base + bits.bit_length() - 1, count >> shift)
    while high - low >= MAX_BINS:
        bits, base = _merged(bits, base)
        shift += 1
        low, high = low >> 1, high >> 1
    bin_ = count >> shift
    if bin_ < base:
        bits <<= base - bin_
        base = bin_
    bits |= 1 << (bin_ - base)
    state.visited_bin_log2 = shift
    state.visited_base = base
    state.visited_bins = bits.to_bytes((bits.bit_length() + 7) // 8, "little")


def _merged(bits: int, base: int) -> tuple[int, int]:
    """The bitmap (bit 0 at bin `base`) over bins twice as wide, and the
    new bin of its bit 0."""
    new_base = base >> 1
    merged = 0
    index = 0
    while bits:
        if bits & 1:
            merged |= 1 << (((base + index) >> 1) - new_base)
        bits >>= 1
        index += 1
    return merged, new_base

"""The bounded set of the counts a query has had, against brute force."""

import random

from transforms.records.zeitgeist_pb2 import DetectorState
from transforms.zeitgeist.visited_counts import MAX_BINS, Placement, visit


def test_the_first_count_has_no_placement():
    state = DetectorState()
    assert visit(state, 1000) is None
    assert visit(state, 1000) == Placement(distance=0.0, span=0.0)


def test_small_ranges_are_exact():
    state = DetectorState()
    for count in (100, 110, 150):
        visit(state, count)
    assert visit(state, 130) == Placement(distance=20.0, span=50.0)  # 110 to 150
    assert visit(state, 90) == Placement(distance=10.0, span=50.0)  # below them
    assert visit(state, 200) == Placement(distance=50.0, span=60.0)  # 90 to 150
    assert visit(state, 130) == Placement(distance=0.0, span=110.0)  # had it
    assert state.visited_bin_log2 == 0


def _brute_force(seen, count):
    return min(abs(count - s) for s in seen), max(seen) - min(seen)


def test_distances_stay_within_a_bin_of_brute_force_at_any_scale():
    rng = random.Random(3)
    for scale in (10, 10_000, 10**9, 10**12):
        state = DetectorState()
        seen = []
        for _ in range(3000):
            count = int(rng.lognormvariate(0, 1) * scale)
            placement = visit(state, count)
            width = 1 << state.visited_bin_log2
            if seen:
                distance, span = _brute_force(seen, count)
                assert abs(placement.distance - distance) <= width
                assert abs(placement.span - span) <= width
            seen.append(count)
            # Bit 0 is the lowest count's bin, which the span is measured from.
            assert state.visited_bins[0] & 1
            assert state.visited_base == min(seen) >> state.visited_bin_log2
            # A bin is a small share of the range the counts span.
            assert width == 1 or width <= (max(seen) - min(seen)) / 500


def test_the_state_stays_small_whatever_the_counts():
    state = DetectorState()
    rng = random.Random(5)
    for _ in range(20_000):
        visit(state, rng.randrange(0, 10**12))
    assert len(state.visited_bins) <= MAX_BINS // 8
    assert len(state.SerializeToString()) < MAX_BINS // 8 + 32


def test_widening_the_bins_keeps_every_count_had():
    # Counts 0..999 exactly, then one far above: bins of 2, 4, ... searches
    # keep each count's bin, so every earlier count is still "had".
    state = DetectorState()
    for count in range(0, 1000, 7):
        visit(state, count)
    visit(state, 100_000)
    assert state.visited_bin_log2 > 0
    for count in range(0, 1000, 7):
        assert visit(state, count).distance == 0.0


def test_the_set_survives_the_state_s_round_trip():
    state = DetectorState()
    for count in (5, 500, 5_000_000):
        visit(state, count)
    copy = DetectorState.FromString(state.SerializeToString())
    assert visit(copy, 2_500_000) == visit(state, 2_500_000)

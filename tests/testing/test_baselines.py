"""The naive baseline the benchmarks measure Zeitgeist against."""

from testing.baselines import first_of_runs, one_window_flags


def test_a_window_far_from_the_past_is_flagged_and_a_short_past_is_not():
    counts = [100] * 60
    counts[5] = 1000  # before 2 x lookback windows: no baseline yet
    counts[25] = 200  # 100 over a flat past: Poisson's spread, 10, so z 10
    counts[50] = 50  # 12 flat windows after the spike: z -5
    assert one_window_flags(counts, lookback=12) == [(25, 10.0), (50, -5.0)]


def test_a_wobble_within_four_spreads_is_not_flagged():
    counts = [100, 120] * 15
    counts[26] = 135  # the past's spread is 10, its mean 110: z 2.5
    assert one_window_flags(counts, lookback=12) == []


def test_one_alert_per_run_of_flagged_windows():
    assert first_of_runs([3, 4, 5, 9, 11, 12]) == [3, 9, 11]
    assert first_of_runs([]) == []

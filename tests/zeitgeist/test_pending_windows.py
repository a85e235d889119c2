"""PendingWindows: the compact state of a query's windows awaiting emission."""

from transforms.zeitgeist.pending_windows import PendingWindows


def test_partials_of_one_window_are_summed_and_kept_in_start_order():
    windows = PendingWindows()
    windows.add([(600, 2), (0, 1), (300, 4), (0, 5)])
    assert windows.take_through(10**9) == {0: 6, 300: 4, 600: 2}
    assert len(windows) == 0


def test_take_through_removes_only_windows_starting_by_the_bound():
    windows = PendingWindows()
    windows.add([(0, 1), (300, 2), (600, 3)])
    assert windows.take_through(299) == {0: 1}
    assert windows.take_through(300) == {300: 2}
    assert len(windows) == 1


def test_the_state_value_round_trips_and_later_partials_merge_into_it():
    windows = PendingWindows()
    windows.add([(-300, 7), (0, 1), (2**40, 9)])
    restored = PendingWindows(windows.to_bytes())
    restored.add([(0, 2)])
    assert restored.take_through(2**40) == {-300: 7, 0: 3, 2**40: 9}


def test_empty_state_reads_as_no_windows():
    assert len(PendingWindows(None)) == 0
    assert PendingWindows(b"").take_through(0) == {}
    assert PendingWindows().to_bytes() == b""


def test_membership_is_by_window_start():
    windows = PendingWindows()
    windows.add([(0, 1), (600, 3)])
    assert 0 in windows and 600 in windows
    assert 300 not in windows and 900 not in windows and -300 not in windows
    windows.take_through(0)
    assert 0 not in windows

"""The retry policy's deadline: each attempt is given only what is left of
it (the emulator-backed cases are in `test_bigtable_faults.py`)."""

import time

import pytest
from google.api_core import exceptions as core

from transforms.photon.bigtable_retry import BigtableUnavailable, call_with_retries

DEADLINE_S = 1.0


def test_each_attempt_is_given_what_the_deadline_leaves():
    started = time.monotonic()
    given: list[tuple[float, float]] = []  # (seconds in, seconds given)

    def call(left_s: float):
        given.append((time.monotonic() - started, left_s))
        # As a client whose own timeout is the budget, never longer than
        # a third of the deadline.
        time.sleep(min(left_s, DEADLINE_S / 3))
        raise core.ServiceUnavailable("down")

    with pytest.raises(BigtableUnavailable, match="'t': op kept failing"):
        call_with_retries("t", "op", call, DEADLINE_S)
    took = time.monotonic() - started
    assert len(given) >= 3
    for seconds_in, left_s in given:
        assert left_s <= DEADLINE_S - seconds_in + 0.01
    # The last attempt ends with the deadline, not an attempt's length after.
    assert took < DEADLINE_S + 0.2, took


def test_an_error_that_is_not_transient_is_raised_at_once():
    calls = []

    def call(left_s: float):
        calls.append(left_s)
        raise core.PermissionDenied("no")

    with pytest.raises(core.PermissionDenied):
        call_with_retries("t", "op", call, DEADLINE_S)
    assert calls == [pytest.approx(DEADLINE_S, abs=0.01)]

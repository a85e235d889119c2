"""A naive detector the benchmarks measure Zeitgeist against, in the same run.

The one-window z rule: a window is flagged when its count is more than 4
spreads from the mean of the `lookback` windows before it, the spread being
their standard deviation, or Poisson's (the root of their mean) if that is
larger, so that a flat or sparse past does not flag every wobble. Online, as
the detector must be: a window is judged on windows before it only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Z_THRESHOLD = 4.0


def one_window_flags(
    counts: Sequence[float], lookback: int = 12
) -> list[tuple[int, float]]:
    """(window index, z) of each flagged window, from the `2 * lookback`-th
    on (a shorter past is no baseline)."""
    values = np.asarray(counts, dtype=float)
    flags = []
    for w in range(lookback * 2, len(values)):
        past = values[w - lookback : w]
        sigma = max(past.std(), np.sqrt(max(past.mean(), 1.0)))
        z = (values[w] - past.mean()) / sigma
        if abs(z) > Z_THRESHOLD:
            flags.append((w, float(z)))
    return flags


def first_of_runs(windows: Sequence[int]) -> list[int]:
    """The first window of each run of consecutive ones: one alert per
    episode, as Zeitgeist's alerts are."""
    return [w for i, w in enumerate(windows) if i == 0 or windows[i - 1] != w - 1]

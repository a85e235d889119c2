"""NAB's scoring rules (standard profile) over per-row anomaly scores.

The Numenta Anomaly Benchmark scores a detector per file of n rows, given
labelled anomaly windows as inclusive row ranges `[a, b]`:

- the first `min(floor(0.15 n), 750)` rows are a probation and not scored,
  and a window with no row after the probation does not count;
- a detection is a row whose score is at or above the threshold;
- inside a window only the earliest detection counts, worth
  `A_tp * sigma(y) / sigma(-1)` with `y = -(b - i + 1) / w`, and a window
  without one costs `A_fn`;
- outside every window a detection at row `i` costs `A_fp * sigma(y)` with
  `y = (i - b') / (w' - 1)` for the last window `[a', b']` that ended before
  `i` (`-A_fp` before any window has ended);
- `sigma(y) = 2 / (1 + exp(5 y)) - 1`, taken as -1 past `y = 3` as NAB does.

NAB's windows are never one row wide; here a one-row window `[b', b']`
makes `w' - 1` zero, and every row after it is taken as infinitely far past
it (the limit as the width shrinks to one row): `sigma` is -1 there, so each
detection after it costs the full `A_fp`.

`normalised` turns a set of raw scores into NAB's 0-100 scale. The sweep
(`best_threshold`) finds the one threshold that maximises the summed raw
score of many files, exactly: the score only changes at the files' own
score values, so each row contributes a step at its score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PROBATION_FRACTION = 0.15
PROBATION_MAX_ROWS = 750


@dataclass(frozen=True)
class Profile:
    """Weights of true positives, false positives and false negatives."""

    a_tp: float = 1.0
    a_fp: float = 0.11
    a_fn: float = 1.0


STANDARD = Profile()


@dataclass(frozen=True)
class LabelledFile:
    """One file's per-row scores and its windows as inclusive row ranges."""

    name: str
    scores: Sequence[float]
    windows: Sequence[tuple[int, int]]

    def __post_init__(self) -> None:
        # A NaN is no detection at any threshold, but it cannot be sorted
        # among the scores the sweep steps through.
        nans = [i for i, score in enumerate(self.scores) if math.isnan(score)]
        if nans:
            raise ValueError(
                f"{self.name}: scores must be numbers, got NaN at row {nans[0]} "
                f"({len(nans)} NaN in all)"
            )
        last = -1
        for start, end in self.windows:
            if not last < start <= end < len(self.scores):
                raise ValueError(
                    f"{self.name}: windows must be sorted, disjoint row ranges "
                    f"within {len(self.scores)} rows, got {list(self.windows)}"
                )
            last = end

    @property
    def probation(self) -> int:
        """Rows at the start that are not scored."""
        n = len(self.scores)
        return min(math.floor(PROBATION_FRACTION * n), PROBATION_MAX_ROWS)

    def scored_windows(self) -> list[tuple[int, int]]:
        """The windows that count: those with a row after the probation."""
        return [(a, b) for a, b in self.windows if b >= self.probation]


def sigma(y: float) -> float:
    """NAB's scaled sigmoid: 1 far before a window's end, -1 far after it."""
    if y > 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def row_weights(labelled: LabelledFile, profile: Profile = STANDARD) -> list[float]:
    """What a detection at each row is worth (0 in the probation).

    Inside a window it is the true-positive credit of being the window's
    earliest detection; outside, the (negative) false-positive cost.
    """
    n = len(labelled.scores)
    weights = [0.0] * n
    inside: list[tuple[int, int] | None] = [None] * n
    for a, b in labelled.windows:
        for i in range(a, b + 1):
            inside[i] = (a, b)
    last_end, last_width = None, None
    for i in range(n):
        window = inside[i]
        if window is not None:
            a, b = window
            width = b - a + 1
            weights[i] = profile.a_tp * sigma(-(b - i + 1) / width) / sigma(-1.0)
            if i == b:
                last_end, last_width = b, width
        elif last_end is None:
            weights[i] = -profile.a_fp
        else:
            weights[i] = profile.a_fp * sigma(_past(i, last_end, last_width))
    for i in range(min(labelled.probation, n)):
        weights[i] = 0.0
    return weights


def _past(i: int, last_end: int, last_width: int) -> float:
    """How far row `i` is past the window of `last_width` rows ending at
    `last_end`, in NAB's units (infinitely far after a one-row window)."""
    if last_width == 1:
        return math.inf
    return (i - last_end) / (last_width - 1)


def raw_score(
    labelled: LabelledFile, threshold: float, profile: Profile = STANDARD
) -> float:
    """NAB's raw score of one file at `threshold`."""
    return raw_score_of_detections(
        labelled,
        [i for i, s in enumerate(labelled.scores) if s >= threshold],
        profile,
    )


def raw_score_of_detections(
    labelled: LabelledFile, rows: Iterable[int], profile: Profile = STANDARD
) -> float:
    """NAB's raw score of one file given the detection rows themselves."""
    weights = row_weights(labelled, profile)
    windows = labelled.scored_windows()
    credited: set[tuple[int, int]] = set()
    total = 0.0
    for i in sorted(set(rows)):
        if i < labelled.probation:
            continue
        # A row after the probation lies in a scored window or in none.
        window = next(((a, b) for a, b in windows if a <= i <= b), None)
        if window is None:
            total += weights[i]
        elif window not in credited:
            credited.add(window)
            total += weights[i]
    return total - profile.a_fn * (len(windows) - len(credited))


def normalised(raw_total: float, windows: int, profile: Profile = STANDARD) -> float:
    """NAB's 0-100 scale: 0 for a detector that never fires, 100 for perfect."""
    if windows < 1:
        # Then a perfect detector and one that never fires both score 0.
        raise ValueError(
            f"normalised needs at least one scored window, got {windows}: "
            "without one the scale has no 0 or 100"
        )
    perfect = profile.a_tp * windows
    null = -profile.a_fn * windows
    return 100.0 * (raw_total - null) / (perfect - null)


def best_threshold(
    files: Sequence[LabelledFile], profile: Profile = STANDARD
) -> tuple[float, float]:
    """The threshold maximising the summed raw score, and that score.

    Lowering the threshold past a row's score makes the row a detection: a
    false positive adds its weight; inside a window it changes the window's
    credit only if it is earlier than the window's detections so far. So
    every file gives steps (score value, change in raw score), and the best
    threshold is found by one pass over all steps in falling score order.
    Ties: the highest threshold reaching the best score.
    """
    steps: list[tuple[float, float]] = []
    never_fires = 0.0
    for labelled in files:
        never_fires -= profile.a_fn * len(labelled.scored_windows())
        steps.extend(_steps(labelled, profile))
    steps.sort(key=lambda step: -step[0])
    best_score, best = never_fires, math.inf
    total = never_fires
    for k, (value, delta) in enumerate(steps):
        total += delta
        closes_a_level = k + 1 == len(steps) or steps[k + 1][0] != value
        if closes_a_level and total > best_score:
            best_score, best = total, value
    return best, best_score


def _steps(labelled: LabelledFile, profile: Profile) -> list[tuple[float, float]]:
    weights = row_weights(labelled, profile)
    scored = set(labelled.scored_windows())
    steps = []
    in_window = set()
    for a, b in labelled.windows:
        in_window.update(range(a, b + 1))
        if (a, b) not in scored:
            continue
        earliest = None
        credit = -profile.a_fn
        rows = range(max(a, labelled.probation), b + 1)
        for i in sorted(rows, key=lambda r: (-labelled.scores[r], r)):
            if earliest is None or i < earliest:
                earliest = i
                steps.append((labelled.scores[i], weights[i] - credit))
                credit = weights[i]
    for i in range(labelled.probation, len(labelled.scores)):
        if i not in in_window:
            steps.append((labelled.scores[i], weights[i]))
    return steps

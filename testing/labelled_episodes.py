"""Episode precision, recall, F1 and delay of alerts against labelled windows.

An alert is a row index: the row at which an episode opened. A labelled
window `[a, b]` (inclusive rows) is found when an alert lies in it; its
delay is the first such alert's row minus `a`. Alerts outside every window
are false alarms, each one an episode raised for nothing. Windows that NAB
does not score (entirely in the probation) are left out, together with the
alerts before the probation ends, so these figures and NAB's describe the
same rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from testing.evaluator import KindScore
from testing.nab import LabelledFile


def episode_score(labelled: LabelledFile, alert_rows: Iterable[int]) -> KindScore:
    """True positives (windows found), false negatives, false alarms, delays."""
    windows = labelled.scored_windows()
    first_alert: dict[tuple[int, int], int] = {}
    false_alarms = 0
    for row in sorted(set(alert_rows)):
        if row < labelled.probation:
            continue
        window = next(((a, b) for a, b in windows if a <= row <= b), None)
        if window is None:
            false_alarms += 1
        else:
            first_alert.setdefault(window, row)
    return KindScore(
        true_positives=len(first_alert),
        false_negatives=len(windows) - len(first_alert),
        false_positives=false_alarms,
        delays=tuple(first_alert[w] - w[0] for w in windows if w in first_alert),
    )


def combined(scores: Iterable[KindScore]) -> KindScore:
    """The counts and delays of several files added up."""
    tp = fn = fp = 0
    delays: list[int] = []
    for score in scores:
        tp += score.true_positives
        fn += score.false_negatives
        fp += score.false_positives
        delays.extend(score.delays)
    return KindScore(tp, fn, fp, tuple(delays))

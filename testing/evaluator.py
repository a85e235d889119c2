"""Episode-level scoring of Zeitgeist anomalies against generated ground truth.

A detection is an anomaly's (query, kind, window_start); revisions of the same
window count once. It matches an episode of the same query and kind when its
window starts in `[episode.start_ms, episode.end_ms + tolerance_windows *
window_ms)`: the tolerance credits a detector that needs a few windows of
evidence, or that fires as traffic returns to normal.

* An episode with at least one matching detection is a true positive, however
  many detections it has; otherwise it is a false negative.
* Detections matching no episode are false alarms. Consecutive windows of one
  query and kind form a single false alarm, so a detector is charged per
  alarm raised, the same unit in which it is credited for episodes.
* Precision and recall are computed on these episode counts. With nothing to
  divide they are vacuously 1.0: no detections means no false alarms, and no
  episodes means nothing was missed.
* Delay is the first matching detection's window minus the episode's first
  window, in windows.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from testing.zeitgeist_generator import DAY_MS, DIP, SPIKE, Episode
from transforms.records import zeitgeist_pb2

WEEK_MS = 7 * DAY_MS
KINDS = (SPIKE, DIP)


class Detection(Protocol):
    """What the evaluator reads from an anomaly; `Anomaly` protos qualify."""

    query: str
    kind: int | str
    window_start: int


@dataclass(frozen=True)
class FalseAlarm:
    """Consecutive unmatched detections: windows `[start_ms, end_ms)`."""

    query: str
    kind: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class KindScore:
    """Episode-level counts and delays for one kind, or for all kinds."""

    true_positives: int
    false_negatives: int
    false_positives: int
    delays: tuple[int, ...]

    @property
    def precision(self) -> float:
        raised = self.true_positives + self.false_positives
        return self.true_positives / raised if raised else 1.0

    @property
    def recall(self) -> float:
        injected = self.true_positives + self.false_negatives
        return self.true_positives / injected if injected else 1.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    @property
    def median_delay(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None


@dataclass(frozen=True)
class EvaluationReport:
    """Scores per kind (`"SPIKE"`, `"DIP"`) and overall, plus what went wrong."""

    by_kind: dict[str, KindScore]
    overall: KindScore
    missed: tuple[Episode, ...]
    false_alarms: tuple[FalseAlarm, ...]

    def format(self) -> str:
        """A small fixed-width table, one row per kind and one overall."""
        header = (
            f"{'kind':<6}{'TP':>6}{'FN':>6}{'FP':>6}"
            f"{'precision':>11}{'recall':>8}{'F1':>7}{'median delay':>14}"
        )
        rows = [(kind, self.by_kind[kind]) for kind in KINDS]
        lines = [header]
        for label, score in [*rows, ("all", self.overall)]:
            delay = score.median_delay
            # The vacuous 1.0 of nothing raised or nothing injected is shown
            # as "-": a table of perfect scores over no episode misleads.
            raised = score.true_positives + score.false_positives
            injected = score.true_positives + score.false_negatives
            precision = _shown(score.precision, raised, 11)
            recall = _shown(score.recall, injected, 8)
            f1 = _shown(score.f1, raised and injected, 7)
            lines.append(
                f"{label:<6}{score.true_positives:>6}{score.false_negatives:>6}"
                f"{score.false_positives:>6}{precision}{recall}{f1}"
                f"{'-' if delay is None else f'{delay:.1f}':>14}"
            )
        return "\n".join(lines)


def _shown(value: float, counted: int, width: int) -> str:
    """`value` to three places, or "-" when nothing was `counted`."""
    return f"{value:>{width}.3f}" if counted else f"{'-':>{width}}"


def evaluate(
    anomalies: Iterable[Detection],
    episodes: Sequence[Episode],
    window_ms: int,
    tolerance_windows: int = 2,
    min_magnitude_sigma: float | None = None,
) -> EvaluationReport:
    """Score detections against episodes as described in the module docstring.

    Episodes below `min_magnitude_sigma` are neither required nor penalised:
    they are not counted, and detections matching them are ignored.
    """
    slack = tolerance_windows * window_ms
    by_series: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_series[(episode.query, episode.kind)].append(episode)
    first_hit: dict[Episode, int] = {}
    unmatched = []
    for query, kind, window_start in sorted(_detections(anomalies)):
        hits = [
            e
            for e in by_series.get((query, kind), ())
            if e.start_ms <= window_start < e.end_ms + slack
        ]
        for episode in hits:
            first_hit.setdefault(episode, window_start)
        if not hits:
            unmatched.append((query, kind, window_start))
    counted = [
        e
        for e in episodes
        if min_magnitude_sigma is None or e.magnitude_sigma >= min_magnitude_sigma
    ]
    alarms = _merge_runs(unmatched, window_ms)
    by_kind = {
        kind: _score(
            [e for e in counted if e.kind == kind],
            first_hit,
            [a for a in alarms if a.kind == kind],
            window_ms,
        )
        for kind in KINDS
    }
    return EvaluationReport(
        by_kind=by_kind,
        overall=_score(counted, first_hit, alarms, window_ms),
        missed=tuple(e for e in counted if e not in first_hit),
        false_alarms=tuple(alarms),
    )


def false_alarms_per_query_week(
    anomalies: Iterable[Detection],
    num_queries: int,
    duration_ms: int,
    window_ms: int,
) -> float:
    """False alarms per query per week on traffic without episodes.

    Every detection is false on quiet traffic; consecutive windows of one
    query and kind count as one alarm, as in `evaluate`.
    """
    if num_queries < 1 or duration_ms <= 0:
        raise ValueError(
            "false alarms per query-week need queries and time: num_queries "
            f"and duration_ms must be positive, got {num_queries} and {duration_ms}"
        )
    alarms = _merge_runs(sorted(_detections(anomalies)), window_ms)
    return len(alarms) / (num_queries * duration_ms / WEEK_MS)


def _detections(anomalies: Iterable[Detection]) -> set[tuple[str, str, int]]:
    return {(a.query, _kind_name(a.kind), a.window_start) for a in anomalies}


def _kind_name(kind: int | str) -> str:
    if isinstance(kind, str):
        name = kind.upper()
    else:
        name = zeitgeist_pb2.AnomalyKind.Name(kind)
    if name not in KINDS:
        raise ValueError(f"anomaly kind must be SPIKE or DIP, got {kind!r}")
    return name


def _merge_runs(
    detections: Sequence[tuple[str, str, int]], window_ms: int
) -> list[FalseAlarm]:
    """Merge sorted detections into runs of consecutive windows."""
    runs: dict[tuple[str, str], list[list[int]]] = defaultdict(list)
    for query, kind, window_start in detections:
        spans = runs[(query, kind)]
        if spans and spans[-1][1] == window_start:
            spans[-1][1] = window_start + window_ms
        else:
            spans.append([window_start, window_start + window_ms])
    return [
        FalseAlarm(query, kind, start, end)
        for (query, kind), spans in runs.items()
        for start, end in spans
    ]


def _score(
    episodes: Sequence[Episode],
    first_hit: dict[Episode, int],
    alarms: Sequence[FalseAlarm],
    window_ms: int,
) -> KindScore:
    found = [e for e in episodes if e in first_hit]
    return KindScore(
        true_positives=len(found),
        false_negatives=len(episodes) - len(found),
        false_positives=len(alarms),
        delays=tuple((first_hit[e] - e.start_ms) // window_ms for e in found),
    )

"""Accumulated evidence that a query is spiking or dipping, and its score.

The paper's `UpdateConfidence`, written as two one-sided CUSUMs over the
model's deviation z (in the query's own spreads of noise): each window adds
``z - slack`` to the spike evidence and ``-z - slack`` to the dip evidence,
neither going below zero, and a window back to normal drains either to
half the threshold. A single noisy window rarely passes the threshold; a
real episode does within a window or two. Three guards keep
real traffic from alarming all day:

- z is clipped at `max_deviation_sigma`: one burst, however tall, cannot
  open an episode alone, so heavy tails need a second window;
- the evidence is divided by ``1 + burst_tolerance * m``, m being its own
  long-run mean: a query whose evidence often runs high needs more;
- when the model adopts a lasting shift as the new normal, the evidence
  against the old one is dropped.

The score ``e / (e + threshold)`` is in [0, 1), 0.5 at the threshold, and
keeps rising with the evidence, so a user can pick an operating point.
"""

import dataclasses

from transforms.records.zeitgeist_pb2 import DetectorState, ModelUpdate
from transforms.zeitgeist.params import DetectorParams

# Evidence beyond this many thresholds adds no more to the long-run mean:
# one long episode must not make a query deaf for days.
MEAN_CAP_THRESHOLDS = 3.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One window's evidence (normalised), score, and direction if abnormal."""

    evidence: float
    score: float
    kind: str | None


def update_confidence(
    state: DetectorState, update: ModelUpdate, params: DetectorParams
) -> Verdict:
    """Fold one window's deviation into `state` (in place); judge the window."""
    if update.history < params.min_history_windows:
        return Verdict(0.0, 0.0, None)
    limit = params.max_deviation_sigma
    z = max(-limit, min(limit, update.deviation))
    spike = max(state.spike + z - params.slack_sigma, 0.0)
    dip = max(state.dip - z - params.slack_sigma, 0.0)
    if update.expected < params.min_expected_for_spike:
        spike = 0.0
    if update.expected < params.min_expected_for_dip:
        dip = 0.0
    # A window back to normal drains what an episode accumulated, so that
    # the episode can close and its tail is not an episode of its own.
    if z <= params.slack_sigma:
        spike = min(spike, params.threshold / 2)
    if -z <= params.slack_sigma:
        dip = min(dip, params.threshold / 2)
    raw = max(spike, dip)
    evidence = raw / (1.0 + params.burst_tolerance * state.evidence_mean)
    rate = 1.0 / params.evidence_memory_windows
    capped = min(raw, MEAN_CAP_THRESHOLDS * params.threshold)
    state.evidence_mean += rate * (capped - state.evidence_mean)
    state.spike, state.dip = spike, dip
    if update.new_normal:
        state.spike = state.dip = 0.0
    kind = None
    if evidence > params.threshold:
        kind = "SPIKE" if spike >= dip else "DIP"
    return Verdict(evidence, evidence / (evidence + params.threshold), kind)

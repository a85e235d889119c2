"""Accumulated confidence that a query is spiking or dipping.

The paper's `UpdateConfidence`, written as two one-sided CUSUMs over a
standardised residual z: each window adds ``z - slack`` to the spike
confidence and ``-z - slack`` to the dip confidence, neither going below zero
nor above a cap. A single noisy window rarely passes the threshold; a real
episode does within a window or two.

Search counts are Poisson-like, skewed at low rates: a query expected 5
times seeing 11 is far likelier than a Gaussian z of 2.7 says. So z is taken
on Anscombe's square-root scale, where Poisson noise is close to N(0, 1), and
scaled down by how much noisier than Poisson the model found the query.
"""

import dataclasses
import math

from transforms.records.zeitgeist_pb2 import ModelUpdate
from transforms.zeitgeist.params import DetectorParams


@dataclasses.dataclass(frozen=True)
class Confidence:
    spike: float = 0.0
    dip: float = 0.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The confidence after a window, and which anomaly (if any) it shows."""

    confidence: Confidence
    kind: str | None
    score: float


def update_confidence(
    before: Confidence, update: ModelUpdate, params: DetectorParams
) -> Verdict:
    """Fold one window's residual into `before`.

    A window is reported only if the confidence is past the threshold *and*
    the window itself deviates in that direction, so the windows after an
    episode, while the confidence drains, are not reported.
    """
    if update.history < params.min_history_windows or update.stddev <= 0:
        return Verdict(Confidence(), None, 0.0)
    z = standardised_residual(update.actual, update.expected, update.stddev)
    cap = params.threshold * params.max_confidence_factor
    spike = before.spike + z - params.slack_sigma
    if update.expected < params.min_expected_for_spike:
        spike = 0.0
    dip = before.dip - z - params.slack_sigma
    if update.expected < params.min_expected_for_dip:
        dip = 0.0
    # A window back to normal drains what an episode accumulated, so its
    # tail is not reported on the next noisy window.
    if z <= params.slack_sigma:
        spike = min(spike, params.threshold / 2)
    if -z <= params.slack_sigma:
        dip = min(dip, params.threshold / 2)
    after = Confidence(spike=min(max(spike, 0.0), cap), dip=min(max(dip, 0.0), cap))
    kind = None
    if after.spike > params.threshold and z > params.slack_sigma:
        kind = "SPIKE"
    elif after.dip > params.threshold and -z > params.slack_sigma:
        kind = "DIP"
    score = min(max(after.spike, after.dip) / params.threshold, 1.0)
    return Verdict(after, kind, score)


def standardised_residual(actual: float, expected: float, stddev: float) -> float:
    """How unusual `actual` is, in standard deviations of Poisson-like noise."""
    anscombe = 2.0 * (math.sqrt(actual + 0.375) - math.sqrt(max(expected, 0.0) + 0.375))
    overdispersion = stddev / math.sqrt(max(expected, 1.0))
    return anscombe / max(overdispersion, 1.0)

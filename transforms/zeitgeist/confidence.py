"""Accumulated evidence that a query is spiking or dipping, and its score.

The paper's `UpdateConfidence`, written as two one-sided CUSUMs over the
model's deviation z (in the query's own spreads of noise): each window adds
``z - slack`` to the spike evidence and ``-z - slack`` to the dip evidence,
neither going below zero, and a window back to normal drains either to
half the threshold. A single noisy window rarely passes the threshold; a
real episode does within a window or two. Guards keep
real traffic from alarming all day:

- z is clipped at `max_deviation_sigma`: one burst cannot open an episode
  through the CUSUM alone, so heavy tails need a second window (but see the
  lone window below);
- the evidence is divided by ``1 + burst_tolerance * m``, m being its own
  long-run mean: a query whose evidence often runs high needs more;
- when the model adopts a lasting shift as the new normal, the evidence
  against the old one is dropped;
- with `far_surprise`, a window beyond that clip adds at most its surprise
  for the query, -ln of the share of its windows that went that far
  (`DetectorState.far_share`): bursts that are the query's normal add
  little;
- with `max_autocorrelation`, z is the window's innovation, what the
  previous window's deviation does not explain (`_innovation`): a model
  that follows a slow wander with a lag leaves runs of same-signed
  deviations, each of which would otherwise count as fresh evidence.

The score ``e / (e + threshold)`` is in [0, 1), 0.5 at the threshold, and
keeps rising with the evidence, so a user can pick an operating point.

A lone window far out *for the query* opens an episode alone
(`lone_sigma` > 0): its deviation from the closest of the model's
predictors beats `lone_sigma` and `lone_ratio` times the query's own far
tail, the largest such deviation seen, halving every
`lone_half_life_hours` (kept in `DetectorState.deviation_record`). A query
that often has lone windows that far out keeps a high tail and needs more.

A window beyond every count the query has had opens an episode alone
(`extreme_sigma` > 0): above its highest count (or below its lowest) and
beyond `extreme_sigma` on that side, the highest and lowest kept in
`DetectorState.value_high` and `value_low`. A new record that the model
did not expect is how many labelled anomalies of real series look (a
server's request count at its all-time high, 4.4 spreads out, where the
CUSUM wants a second window): its deviation alone is not far out enough.
A record broken by more than `extreme_margin` of the query's range (its
highest less its lowest count) needs only a deviation beyond the slack.
With `novel_margin` > 0 the same holds inside the range: a window whose
count is further than that share of the range from every count the query
has had (`visited_counts`), and beyond `extreme_sigma` on its side, opens
an episode alone. A CPU that idles at 0.13 with a daily job at 1.5, and
one day sits at 0.6, breaks no record and is far less out than its daily
peaks; it is where the query has never been.
"""

import math
from typing import NamedTuple

from transforms.records.zeitgeist_pb2 import DetectorState, ModelUpdate
from transforms.zeitgeist.forecast import clip
from transforms.zeitgeist.params import DetectorParams
from transforms.zeitgeist.visited_counts import visit

# Evidence beyond this many thresholds adds no more to the long-run mean:
# one long episode must not make a query deaf for days.
MEAN_CAP_THRESHOLDS = 3.0
HOUR_MS = 3_600_000
# Pairs of adjacent windows before the deviations' autocorrelation is used.
AUTOCORRELATION_WARMUP_PAIRS = 100


class Verdict(NamedTuple):
    """One window's evidence (normalised), score, and direction if abnormal.

    A named tuple rather than a frozen dataclass: one is built per window.
    """

    evidence: float
    score: float
    kind: str | None


def update_confidence(
    state: DetectorState, update: ModelUpdate, params: DetectorParams
) -> Verdict:
    """Fold one window's deviation into `state` (in place); judge the window."""
    # Each field read once: a protobuf field read costs a lookup by name.
    # The autocorrelation learns from every window, a young model's too.
    deviation = _innovation(state, update, params)
    history = update.history
    if history < params.min_history_windows:
        return Verdict(0.0, 0.0, None)
    expected = update.expected
    threshold = params.threshold
    slack = params.slack_sigma
    limit = params.max_deviation_sigma
    clipped = clip(deviation, limit)
    z = clipped
    if params.far_surprise:
        z = clip(z, _surprise_clip(state, deviation, params))
    # Floors, drains and maxima here are conditionals, not max/min calls:
    # the same comparisons (so the same values, signed zeros and NaNs
    # included) without a builtin call each, on every window.
    spike = state.spike + z - slack
    spike = 0.0 if spike < 0.0 else spike
    dip = state.dip - z - slack
    dip = 0.0 if dip < 0.0 else dip
    if expected < params.min_expected_for_spike:
        spike = 0.0
    if expected < params.min_expected_for_dip:
        dip = 0.0
    # A window back to normal drains what an episode accumulated, so that
    # the episode can close and its tail is not an episode of its own.
    drained = threshold / 2
    if z <= slack and drained < spike:
        spike = drained
    if -z <= slack and drained < dip:
        dip = drained
    raw = dip if dip > spike else spike
    mean = state.evidence_mean
    evidence = raw / (1.0 + params.burst_tolerance * mean)
    rate = 1.0 / params.evidence_memory_windows
    cap = MEAN_CAP_THRESHOLDS * threshold
    capped = cap if cap < raw else raw
    state.evidence_mean = mean + rate * (capped - mean)
    if update.new_normal:
        state.spike = state.dip = 0.0
    else:
        state.spike, state.dip = spike, dip
    kind = None
    if evidence > threshold:
        kind = "SPIKE" if spike >= dip else "DIP"
    score = evidence / (evidence + threshold)
    # Both rules wait for the same warm-up: judged once per window.
    window_ms = update.window_end - update.window_start
    warming_up = _warming_up(history, window_ms, params)
    if params.lone_sigma:
        least = _least_deviation(update)
        far = _far_out(state, least, expected, window_ms, params, warming_up)
        if far > 1.0 and kind is None:
            kind = "SPIKE" if least > 0 else "DIP"
            evidence = max(evidence, threshold * far)
            score = max(score, evidence / (evidence + threshold))
    if params.extreme_sigma:
        side = _beyond_extremes(state, update, expected, clipped, params, warming_up)
        if params.novel_margin:
            # Every count joins the visited ones, a young query's too.
            novel = _novel_count(state, update.actual, expected, clipped, params)
            if side is None and not warming_up:
                side = novel
        if side is not None and kind is None:
            kind = side
            evidence = max(evidence, threshold)
            score = max(score, evidence / (evidence + threshold))
    return Verdict(evidence, score, kind)


def _surprise_clip(
    state: DetectorState, deviation: float, params: DetectorParams
) -> float:
    """The CUSUM's clip for this window (`far_surprise`), and the query's
    share of far windows updated (in place).

    A window beyond `max_deviation_sigma` is, for the query, an event of
    the share s of its past windows that went that far; it adds at most
    ``-ln s`` (its surprise, in nats) beyond the slack, never more than
    the usual clip. A query that bursts every few hours (disk writes, a
    quantised CPU series whose every step is 20 spreads) gets little from
    one more burst; one whose windows stayed close gets the full clip. The
    share is judged before the window joins it, over about
    `evidence_memory_windows` windows; it starts at 0 (the full clip), so
    a new query is as sensitive as before.
    """
    limit = params.max_deviation_sigma
    share = state.far_share
    far = 1.0 if abs(deviation) > limit else 0.0
    state.far_share = share + (far - share) / params.evidence_memory_windows
    if share <= 0.0:
        return limit
    surprise = params.slack_sigma - math.log(share)
    # `min(limit, surprise)` as the conditional that gives its value: most
    # windows take this path.
    return surprise if surprise < limit else limit


def _beyond_extremes(
    state: DetectorState,
    update: ModelUpdate,
    expected: float,
    z: float,
    params: DetectorParams,
    warming_up: bool,
) -> str | None:
    """ "SPIKE" if the window's count is above every count the query has
    had and `z` (the clipped deviation) beats `extreme_sigma`; "DIP" if
    below every one and `-z` beats it; else None. The query's highest and
    lowest counts are updated (in place), after the window is judged.

    Only on windows expected (`expected`, the update's) at least
    `extreme_min_expected` (at a few searches a new record is one search
    away, and Poisson's tail there is wider than the root scale's normal
    one), and once the detector has judged the query for
    `lone_warmup_hours` (not `warming_up`): a young query's record is no
    record. A state with no extremes yet (new, or
    written before the fields) starts them at this window.
    """
    actual = float(update.actual)
    if not state.HasField("value_high"):
        state.value_high = state.value_low = actual
        return None
    high, low = state.value_high, state.value_low
    # max(high, actual) and min(low, actual), without builtin calls.
    state.value_high = actual if actual > high else high
    state.value_low = actual if actual < low else low
    if warming_up:
        return None
    if expected < params.extreme_min_expected:
        return None
    span = high - low
    if actual > high and expected >= params.min_expected_for_spike:
        return "SPIKE" if _unexpected_record(actual - high, z, span, params) else None
    if actual < low and expected >= params.min_expected_for_dip:
        return "DIP" if _unexpected_record(low - actual, -z, span, params) else None
    return None


def _unexpected_record(
    beyond: float, z: float, span: float, params: DetectorParams
) -> bool:
    """Whether a record broken by `beyond` searches, at a deviation `z` on
    its side, on a query whose counts have spanned `span`, opens an episode:
    z beats `extreme_sigma`, or the record is broken by more than
    `extreme_margin` of the span and z beats the slack.

    The margin is the scale-free test: a smooth series (a CPU at 46 % give
    or take 4, whose high is 56) can break its record by a quarter of its
    range at a deviation of 2.6, where a Poisson query breaking its record
    by that much is about 4.5 spreads out, as `extreme_sigma` asks anyway.
    """
    if z > params.extreme_sigma:
        return True
    margin = params.extreme_margin
    return margin > 0.0 and beyond > margin * span and z > params.slack_sigma


def _novel_count(
    state: DetectorState, count: int, expected: float, z: float, params: DetectorParams
) -> str | None:
    """ "SPIKE" or "DIP" (the side of `z`, the clipped deviation) if the
    window's `count` is further than `novel_margin` of the query's range
    from every count the query has had, and `z` beats `extreme_sigma` on
    its side; else None. The count joins the query's visited counts (in
    place) after it is judged.

    A generalisation of the record (`_beyond_extremes`) to the inside of
    the range: where the query's counts have never been is as new for it
    as beyond where they have been. The range is that of the visited
    counts, so the rule needs no other state. The same guards as the
    record's: a query expected at least `extreme_min_expected` (and, in
    the caller, judged for `lone_warmup_hours`).
    """
    placement = visit(state, count)
    if placement is None or expected < params.extreme_min_expected:
        return None
    if placement.distance <= params.novel_margin * placement.span:
        return None
    if z > params.extreme_sigma and expected >= params.min_expected_for_spike:
        return "SPIKE"
    if -z > params.extreme_sigma and expected >= params.min_expected_for_dip:
        return "DIP"
    return None


def _far_out(
    state: DetectorState,
    deviation: float,
    expected: float,
    window_ms: int,
    params: DetectorParams,
    warming_up: bool,
) -> float:
    """How far the window's |deviation| (its `_least_deviation`, expected
    `expected`, `window_ms` long) is beyond the query's own far tail (a
    ratio, > 1 when it is beyond), and that tail updated (in place).

    The tail is the largest |deviation| seen so far, decaying by half every
    `lone_half_life_hours` of event time: a query that often has lone
    windows this far out keeps a high record and needs more; one whose
    past windows stayed close needs only `lone_sigma`. Judged before the
    window joins the tail, and only once the detector has judged the query
    for `lone_warmup_hours` (not `warming_up`): a young model's tail is not
    yet known.
    """
    size = abs(deviation)
    record = state.deviation_record
    # max(lone_sigma, lone_ratio * record), without a builtin call.
    level = params.lone_ratio * record
    level = level if level > params.lone_sigma else params.lone_sigma
    side_ok = expected >= (
        params.min_expected_for_spike if deviation > 0 else params.min_expected_for_dip
    )
    decay = 0.5 ** (window_ms / (params.lone_half_life_hours * HOUR_MS))
    decayed = decay * record
    state.deviation_record = decayed if decayed > size else size
    if not side_ok or warming_up:
        return 0.0
    return size / level


def _warming_up(history: int, window_ms: int, params: DetectorParams) -> bool:
    """Whether the detector has judged the query (whose model has seen
    `history` windows of `window_ms`) for less than `lone_warmup_hours` of
    event time, when its records mean nothing yet."""
    judged_ms = (history - params.min_history_windows) * window_ms
    return judged_ms < params.lone_warmup_hours * HOUR_MS


def _innovation(
    state: DetectorState, update: ModelUpdate, params: DetectorParams
) -> float:
    """The window's deviation less what the previous window's explains,
    ``(z - rho z_prev) / sqrt(1 - rho^2)``, and the query's autocorrelation
    updated (in place); the deviation itself with `max_autocorrelation` 0.

    Why: a model that follows a series with a lag leaves deviations that
    persist (a slow wander is z 2, 2.5, 3, ... for hours), and the CUSUM
    adds them up as if each were fresh evidence. Their lag-one
    autocorrelation rho, learned from the query's own pairs of adjacent
    windows, says how much of each deviation the one before predicts; the
    innovation is the rest, in the same units (its spread is the
    deviation's). rho is judged before the window joins it, is 0 for the
    first `AUTOCORRELATION_WARMUP_PAIRS` pairs, never below 0 (deviations
    that alternate are not made larger) and at most `max_autocorrelation`:
    a real episode is a run of deviations too, and a rho near 1 would see
    only its first window. A window after a gap (no adjacent predecessor),
    or after the model adopted a new normal, has no innovation to take out
    and is judged on its deviation.
    """
    deviation = update.deviation
    cap = params.max_autocorrelation
    if not cap:
        return deviation
    z = clip(deviation, params.max_deviation_sigma)
    start = update.window_start
    adjacent = (
        state.HasField("previous_deviation_start")
        and state.previous_deviation_start + (update.window_end - start) == start
    )
    previous = state.previous_deviation
    state.previous_deviation = z
    if update.new_normal:
        # The next window is predicted from the new normal: this window's
        # deviation, from the old one, says nothing about it.
        state.ClearField("previous_deviation_start")
    else:
        state.previous_deviation_start = start
    if not adjacent:
        return deviation
    pairs = state.deviation_pairs
    products = state.deviation_products
    squares = state.deviation_squares
    rho = 0.0
    if pairs >= AUTOCORRELATION_WARMUP_PAIRS and squares > 0.0:
        rho = products / squares
        rho = 0.0 if rho < 0.0 else cap if rho > cap else rho
    # A plain mean over the first pairs, then a memory of
    # `evidence_memory_windows`, as the evidence's own mean.
    memory = params.evidence_memory_windows
    rate = 1.0 / (pairs + 1) if pairs < memory else 1.0 / memory
    state.deviation_products = products + rate * (z * previous - products)
    state.deviation_squares = squares + rate * (z * z - squares)
    state.deviation_pairs = pairs + 1
    if not rho:
        return deviation
    return (deviation - rho * previous) / math.sqrt(1.0 - rho * rho)


def _least_deviation(update: ModelUpdate) -> float:
    """The window's deviation from the closest of the model's predictors."""
    if update.HasField("least_deviation"):
        return update.least_deviation
    return update.deviation

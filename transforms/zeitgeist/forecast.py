"""The per-query traffic model: prediction and update, as plain functions.

The model is a damped level/trend with exponentially weighted residual
variance (Holt's method) and optional multiplicative seasonal factors, kept in
a `ModelState` proto. `predict` uses only what has been folded in so far and
`fold` is called once per window in event-time order, after that window's
prediction was taken, so the prediction for a window never sees the window.
"""

import dataclasses
import math

from transforms.records.zeitgeist_pb2 import ModelState
from transforms.zeitgeist.params import SEASON_MS, ModelParams


@dataclasses.dataclass(frozen=True)
class Prediction:
    expected: float
    stddev: float
    history: int


def predict(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> Prediction:
    """Expected count and its standard deviation for the window at `window_start`.

    The standard deviation never falls below the Poisson noise of the expected
    count, nor below one search, so a near-silent query is not flagged for a
    couple of searches.
    """
    if state.history == 0:
        return Prediction(expected=0.0, stddev=1.0, history=0)
    base = max(state.level + params.trend_damping * state.trend, 0.0)
    expected = base * _seasonal_factor(state, params, window_start, window_ms)
    stddev = math.sqrt(max(state.variance, expected, 1.0))
    return Prediction(expected=expected, stddev=stddev, history=state.history)


def fold(
    state: ModelState,
    params: ModelParams,
    window_start: int,
    window_ms: int,
    actual: int,
) -> Prediction:
    """Fold the window's count into `state`; return the prediction it had."""
    if SEASON_MS[params.seasonality] and not state.seasonal:
        slots = max(SEASON_MS[params.seasonality] // window_ms, 1)
        state.seasonal.extend([1.0] * slots)
    prediction = predict(state, params, window_start, window_ms)
    if state.history == 0:
        state.level = float(actual)
        state.trend = 0.0
        state.variance = max(float(actual), 1.0)
    else:
        _update(state, params, prediction, window_start, window_ms, actual)
    state.history += 1
    state.last_window_start = window_start
    return prediction


def _update(
    state: ModelState,
    params: ModelParams,
    prediction: Prediction,
    window_start: int,
    window_ms: int,
    actual: int,
) -> None:
    residual = actual - prediction.expected
    limit = params.robust_clip_sigma * prediction.stddev
    state.excursion = _excursion(state.excursion, residual / prediction.stddev, params)
    # During a young excursion (an episode, most likely) the model barely
    # learns: a spike must not become the new normal within a few windows, or
    # its end would look like a dip.
    young = 0 < abs(state.excursion) <= params.max_excursion_windows
    weight = params.outlier_weight if young else 1.0
    clipped = max(-limit, min(limit, residual))
    factor = _seasonal_factor(state, params, window_start, window_ms)
    base = max(state.level + params.trend_damping * state.trend, 0.0)
    observed = (prediction.expected + clipped) / factor

    alpha = params.alpha * weight
    beta = params.beta * weight
    level = alpha * observed + (1.0 - alpha) * base
    state.trend = (
        beta * (level - state.level) + (1.0 - beta) * params.trend_damping * state.trend
    )
    state.level = level
    gamma = params.variance_alpha * weight
    state.variance = (1.0 - gamma) * state.variance + gamma * clipped * clipped
    if state.seasonal and base > 0.0:
        slot = _slot(params, window_start, window_ms)
        delta = params.seasonal_alpha * weight
        ratio = (prediction.expected + clipped) / base
        state.seasonal[slot] = (1.0 - delta) * state.seasonal[slot] + delta * ratio


def _seasonal_factor(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> float:
    if not state.seasonal:
        return 1.0
    return max(state.seasonal[_slot(params, window_start, window_ms)], 1e-6)


def _slot(params: ModelParams, window_start: int, window_ms: int) -> int:
    season_ms = SEASON_MS[params.seasonality]
    return (window_start % season_ms) // window_ms


def _excursion(run: int, z: float, params: ModelParams) -> int:
    """The signed excursion run length after a window with residual `z`."""
    if run > 0 and z > params.excursion_exit_sigma:
        return run + 1
    if run < 0 and z < -params.excursion_exit_sigma:
        return run - 1
    if abs(z) > params.excursion_sigma:
        return 1 if z > 0 else -1
    return 0

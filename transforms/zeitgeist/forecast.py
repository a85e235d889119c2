"""The per-query traffic model: prediction and update, as plain functions.

Counts live on the square-root scale ``2 sqrt(count + 3/8)`` (Anscombe's),
where Poisson noise has a spread of one at any rate, bursts are tamed, and a
query of 10^8 searches per window is no different in kind from one of 10.
The spread of the noise is not assumed: each predictor learns its own from
the query's residuals, so over-dispersed traffic is judged by its own
standard, never below Poisson's.

Two predictors (see `ModelParams`): a level, and a seasonal memory of the
last few seasons whose median at the window's slot is robust to an episode
on one of those days. The model uses the seasonal one while it clearly
predicts better: seasonality is detected, not declared.

`fold` is called once per window in event-time order and takes the
window's prediction *before* folding the window in, so the prediction for a
window never sees the window.
"""

import dataclasses
import math
import statistics

from transforms.records.zeitgeist_pb2 import ModelState
from transforms.zeitgeist.params import SEASON_MS, ModelParams

# The mean absolute deviation of a normal variable is sigma * sqrt(2 / pi).
MAD_TO_SIGMA = math.sqrt(math.pi / 2)
# Poisson noise on the square-root scale: the spread never goes below it.
MIN_SPREAD = 1.0
# Windows over which a new model's spread is a plain mean of its residuals.
YOUNG_WINDOWS = 12


def root(count: float) -> float:
    """Anscombe's transform of a count."""
    return 2.0 * math.sqrt(max(count, 0.0) + 0.375)


def unroot(value: float) -> float:
    """The count whose root is `value` (0 below the root of 0)."""
    return max((value / 2.0) ** 2 - 0.375, 0.0)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A window's prediction: in counts, and on the root scale."""

    expected: float
    stddev: float
    history: int
    root: float = 0.0
    spread: float = MIN_SPREAD

    def deviation(self, actual: int) -> float:
        """How far `actual` is from the prediction, in spreads of noise."""
        if self.history == 0:
            return 0.0
        return (root(actual) - self.root) / self.spread


@dataclasses.dataclass(frozen=True)
class Folded:
    """What folding a window gives: its prediction, and whether the window
    made a lasting shift the model's new normal."""

    prediction: Prediction
    new_normal: bool = False


def predict(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> Prediction:
    """Expected count and its spread for the window at `window_start`."""
    if state.history == 0:
        return Prediction(expected=0.0, stddev=1.0, history=0)
    seasonal = _seasonal_root(state, params, window_start, window_ms)
    if seasonal is not None and _prefers_seasonal(state, params):
        centre, spread = seasonal, state.season_spread
    else:
        centre, spread = state.level, state.level_spread
    sigma = max(MAD_TO_SIGMA * spread, MIN_SPREAD)
    # d(count) = (root / 2) d(root): the spread in counts, for plots.
    return Prediction(
        expected=unroot(centre),
        stddev=sigma * max(centre, 1.0) / 2.0,
        history=state.history,
        root=centre,
        spread=sigma,
    )


def fold(
    state: ModelState,
    params: ModelParams,
    window_start: int,
    window_ms: int,
    actual: int,
) -> Folded:
    """Fold the window's count into `state`; return the prediction it had."""
    _forget_skipped(state, params, window_start, window_ms)
    prediction = predict(state, params, window_start, window_ms)
    value = root(actual)
    new_normal = False
    if state.history == 0:
        state.level = value
    else:
        new_normal = _update(state, params, prediction, window_start, window_ms, value)
    _remember(state, params, window_start, window_ms, value)
    state.history += 1
    state.last_window_start = window_start
    return Folded(prediction, new_normal)


def _update(
    state: ModelState,
    params: ModelParams,
    prediction: Prediction,
    window_start: int,
    window_ms: int,
    value: float,
) -> bool:
    """Learn from one window; True if it made an excursion the new normal."""
    residual = value - prediction.root
    before = state.excursion
    state.excursion = _excursion(before, residual / prediction.spread, params)
    # A run that goes on adds up; a new run (or none) starts afresh.
    going_on = state.excursion * before > 0
    state.excursion_sum = (state.excursion_sum if going_on else 0.0) + (
        residual if state.excursion else 0.0
    )
    seasonal = _seasonal_root(state, params, window_start, window_ms)
    if abs(state.excursion) > params.max_excursion_windows:
        # A shift this long is the new normal: the predictor in use moves by
        # it, rather than creeping there and alarming all the way. (The
        # other one learns it from its own residuals.)
        shift = state.excursion_sum / abs(state.excursion)
        if seasonal is not None and _prefers_seasonal(state, params):
            state.season_offset += shift
        else:
            state.level += shift
        state.excursion = 0
        state.excursion_sum = 0.0
        return True
    # During a young excursion (an episode, most likely) the model barely
    # learns, or the episode's end would look like an episode of its own.
    weight = params.outlier_weight if state.excursion else 1.0
    # A young model's spread is the plain mean of its first residuals: it
    # starts at zero, and creeping up from there would make every window an
    # excursion, which learns too little to ever catch up (seen at 10^8).
    young = state.history < YOUNG_WINDOWS
    spread_weight = 1.0 if young else weight
    rate = 1.0 / state.history if young else params.spread_alpha
    level_residual = _learn_spread(
        state, "level", value - state.level, rate * spread_weight, params
    )
    state.level += params.alpha * weight * level_residual
    if seasonal is not None:
        if not state.season_spread:
            # The seasonal predictor's first window: it starts from the
            # level's spread and error, and must earn its preference.
            state.season_spread = state.level_spread
            state.season_error = state.level_error
        season_residual = _learn_spread(
            state, "season", value - seasonal, params.spread_alpha * weight, params
        )
        state.season_offset += params.alpha * weight * season_residual
    return False


def _learn_spread(
    state: ModelState, name: str, residual: float, rate: float, params: ModelParams
) -> float:
    """Update one predictor's spread and error; return the clipped residual."""
    spread = getattr(state, f"{name}_spread")
    error = getattr(state, f"{name}_error")
    limit = params.clip_sigma * max(MAD_TO_SIGMA * spread, MIN_SPREAD)
    clipped = max(-limit, min(limit, residual))
    setattr(state, f"{name}_spread", spread + rate * (abs(clipped) - spread))
    setattr(
        state, f"{name}_error", error + params.error_alpha * (abs(residual) - error)
    )
    return clipped


def _prefers_seasonal(state: ModelState, params: ModelParams) -> bool:
    return state.season_error < params.seasonal_choice_ratio * state.level_error


def _seasonal_root(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> float | None:
    """Median of the slot's roots over the remembered seasons, plus offset."""
    slots = _slots(params, window_ms)
    if not slots or not state.season_roots:
        return None
    index = window_start // window_ms
    size = len(state.season_roots)
    past = [
        state.season_roots[(index - k * slots) % size]
        for k in range(1, params.seasonal_periods + 1)
    ]
    known = [v for v in past if not math.isnan(v)]
    if not known:
        return None
    return statistics.median(known) + state.season_offset


def _remember(
    state: ModelState,
    params: ModelParams,
    window_start: int,
    window_ms: int,
    value: float,
) -> None:
    slots = _slots(params, window_ms)
    if not slots:
        return
    if not state.season_roots:
        state.season_roots.extend([math.nan] * (slots * params.seasonal_periods))
    index = window_start // window_ms
    # The seasonal median is taken against the offset at the time.
    state.season_roots[index % len(state.season_roots)] = value - state.season_offset


def _forget_skipped(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> None:
    """Windows skipped since the last fold (an idle query) are unknown, not
    whatever their slots held a season or more ago."""
    if not state.season_roots or not state.history:
        return
    size = len(state.season_roots)
    first = state.last_window_start // window_ms + 1
    last = window_start // window_ms
    for index in range(first, min(last, first + size)):
        state.season_roots[index % size] = math.nan


def _slots(params: ModelParams, window_ms: int) -> int:
    """Windows per season, or 0 when there is no season to try."""
    season_ms = SEASON_MS[params.seasonality]
    if not season_ms or window_ms >= season_ms:
        return 0
    return season_ms // window_ms


def _excursion(run: int, z: float, params: ModelParams) -> int:
    """The signed excursion run length after a window with deviation `z`."""
    if run > 0 and z > params.excursion_exit_sigma:
        return run + 1
    if run < 0 and z < -params.excursion_exit_sigma:
        return run - 1
    if abs(z) > params.excursion_sigma:
        return 1 if z > 0 else -1
    return 0

"""The per-query traffic model: prediction and update, as plain functions.

Counts live on the square-root scale ``2 sqrt(count + 3/8)`` (Anscombe's),
where Poisson noise has a spread of one at any rate, bursts are tamed, and a
query of 10^8 searches per window is no different in kind from one of 10.
The spread of the noise is not assumed: each predictor learns its own from
the query's residuals, so over-dispersed traffic is judged by its own
standard, never below Poisson's.

Predictors (see `ModelParams`): a level, and a seasonal memory of the last
few seasons whose median at the window's slot is robust to an episode on one
of those days; with `seasonality: auto`, a daily and a weekly memory. The
model uses a seasonal one while it clearly predicts better than the
predictor it would replace: seasonality is detected, not declared.

`fold` is called once per window in event-time order and takes the
window's prediction *before* folding the window in, so the prediction for a
window never sees the window.
"""

import dataclasses
import functools
import math
from typing import NamedTuple

from transforms.records.zeitgeist_pb2 import ModelState
from transforms.zeitgeist.params import MINUTE_MS, SEASON_MS, WEEK_MS, ModelParams

# The mean absolute deviation of a normal variable is sigma * sqrt(2 / pi).
MAD_TO_SIGMA = math.sqrt(math.pi / 2)
# Poisson noise on the square-root scale: the spread never goes below it.
MIN_SPREAD = 1.0
# Windows over which a new model's spread is a plain mean of its residuals.
YOUNG_WINDOWS = 12
# Past weeks the automatic weekly memory must know at a slot to predict it:
# one week's hour is a single noisy value, no evidence of a weekly pattern
# (measured: it let the weekly predictor win by chance on two-week series).
WEEKLY_MIN_KNOWN = 2


def root(count: float) -> float:
    """Anscombe's transform of a count."""
    # `max(count, 0.0)`, without a builtin call: roots are taken per window.
    return 2.0 * math.sqrt((0.0 if count < 0.0 else count) + 0.375)


def clip(value: float, limit: float) -> float:
    """`max(-limit, min(limit, value))` as conditionals (the builtins' own
    comparisons, without their calls): the model and the detector clip
    several times per window."""
    value = value if value < limit else limit
    return value if value > -limit else -limit


def unroot(value: float) -> float:
    """The count whose root is `value` (0 below the root of 0)."""
    count = (value / 2.0) ** 2 - 0.375
    return 0.0 if count < 0.0 else count  # max(count, 0.0), without a call


class Prediction(NamedTuple):
    """A window's prediction: in counts, and on the root scale.

    A named tuple rather than a frozen dataclass: one is built per window,
    and a frozen dataclass sets each field through `object.__setattr__`.
    """

    expected: float
    stddev: float
    history: int
    root: float = 0.0
    spread: float = MIN_SPREAD
    # The other predictors that know the window, as (root, spread): a
    # window one of them expects is not far out for the query.
    others: tuple[tuple[float, float], ...] = ()

    def deviation(self, actual: int) -> float:
        """How far `actual` is from the prediction, in spreads of noise."""
        return self._deviation(root(actual))

    def least_deviation(self, actual: int) -> float:
        """`deviation`, or the smallest (in size) of the deviations from the
        other predictors if one is smaller: how far out the window is for
        every predictor of the model."""
        value = root(actual)
        return self._least_deviation(value, self._deviation(value))

    def deviations(self, actual: int) -> tuple[float, float | None]:
        """`deviation`, and `least_deviation` if there are other predictors
        (else None), from one root of `actual`: a `ModelUpdate` takes both."""
        value = root(actual)
        deviation = self._deviation(value)
        if not self.others:
            return deviation, None
        return deviation, self._least_deviation(value, deviation)

    def _deviation(self, value: float) -> float:
        """`deviation` of the window whose root is `value`."""
        if self.history == 0:
            return 0.0
        return (value - self.root) / self.spread

    def _least_deviation(self, value: float, least: float) -> float:
        """`least_deviation` of the window whose root is `value` and whose
        `deviation` is `least`."""
        for centre, spread in self.others:
            other = (value - centre) / spread
            if abs(other) < abs(least):
                least = other
        return least


class Folded(NamedTuple):
    """What folding a window gives: its prediction, and whether the window
    made a lasting shift the model's new normal."""

    prediction: Prediction
    new_normal: bool = False


class _Fields(NamedTuple):
    """A predictor's fields in `ModelState`, named once: formatting the
    names per window cost more than reading the fields."""

    spread: str
    error: str
    # None for the level, whose centre is `level` itself, kept in no ring.
    offset: str | None
    roots: str | None


_FIELDS = {
    "level": _Fields("level_spread", "level_error", None, None),
    "season": _Fields("season_spread", "season_error", "season_offset", "season_roots"),
    "week": _Fields("week_spread", "week_error", "week_offset", "week_roots"),
}


def predict(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> Prediction:
    """Expected count and its spread for the window at `window_start`."""
    if state.history == 0:
        return Prediction(expected=0.0, stddev=1.0, history=0)
    memories = _memories(params, window_ms)
    seasonal = _seasonal_roots(state, memories, window_start)
    return _predict(state, params, seasonal, state.history)


def _predict(
    state: ModelState, params: ModelParams, seasonal: dict[str, float], history: int
) -> Prediction:
    """`predict` for a model with history, given its seasonal roots and its
    `history` (which the caller has read)."""
    name = _chosen(state, params, seasonal)
    level = state.level
    centre = seasonal[name] if name != "level" else level
    sigma = _sigma(getattr(state, _FIELDS[name].spread))
    # The others, the level first: two loops rather than one over a list
    # built per window.
    others = []
    if name != "level":
        spread = state.level_spread
        if spread:
            others.append((level, _sigma(spread)))
    for other_name, other in seasonal.items():
        if other_name == name:
            continue
        spread = getattr(state, _FIELDS[other_name].spread)
        if spread:
            others.append((other, _sigma(spread)))
    # d(count) = (root / 2) d(root): the spread in counts, for plots.
    # `max(centre, 1.0)` as the conditional that gives its value.
    stddev = sigma * (1.0 if centre < 1.0 else centre) / 2.0
    # Positionally, in the fields' order: keywords cost a named tuple as
    # much again as the rest of its construction (measured: 0.45 µs, 0.24).
    return Prediction(unroot(centre), stddev, history, centre, sigma, tuple(others))


def _sigma(spread: float) -> float:
    """A predictor's spread of noise on the root scale, from its learned
    spread (a mean absolute residual)."""
    sigma = MAD_TO_SIGMA * spread
    # `max(sigma, MIN_SPREAD)`, without a builtin call: several per window.
    return MIN_SPREAD if sigma < MIN_SPREAD else sigma


def fold(
    state: ModelState,
    params: ModelParams,
    window_start: int,
    window_ms: int,
    actual: int,
) -> Folded:
    """Fold the window's count into `state`; return the prediction it had."""
    # One lookup of the memories per window.
    memories = _memories(params, window_ms)
    # Read once, for the steps below.
    history = state.history
    _forget_skipped(state, memories, window_start, window_ms, history)
    value = root(actual)
    new_normal = False
    if history == 0:
        prediction = predict(state, params, window_start, window_ms)
        state.level = value
    else:
        # Learning moves no memory before it reads them: one lookup serves
        # the prediction and the update.
        seasonal = _seasonal_roots(state, memories, window_start)
        prediction = _predict(state, params, seasonal, history)
        new_normal = _update(state, params, prediction, seasonal, value, history)
    _remember(state, memories, window_start, window_ms, value)
    state.history = history + 1
    state.last_window_start = window_start
    return Folded(prediction, new_normal)


def _update(
    state: ModelState,
    params: ModelParams,
    prediction: Prediction,
    seasonal: dict[str, float],
    value: float,
    history: int,
) -> bool:
    """Learn from one window, whose seasonal roots are `seasonal`, in a
    model of `history` windows; True if it made an excursion the new
    normal."""
    residual = value - prediction.root
    before = state.excursion
    excursion = _excursion(before, residual / prediction.spread, params)
    state.excursion = excursion
    # A run that goes on adds up; a new run (or none) starts afresh.
    going_on = excursion * before > 0
    excursion_sum = (state.excursion_sum if going_on else 0.0) + (
        residual if excursion else 0.0
    )
    state.excursion_sum = excursion_sum
    if abs(excursion) > params.max_excursion_windows:
        # A shift this long is the new normal: the predictor in use moves by
        # it, rather than creeping there and alarming all the way. (The
        # others learn it from their own residuals.)
        shift = excursion_sum / abs(excursion)
        name = _chosen(state, params, seasonal)
        if name == "level":
            state.level += shift
        else:
            offset = _FIELDS[name].offset
            setattr(state, offset, getattr(state, offset) + shift)
        state.excursion = 0
        state.excursion_sum = 0.0
        return True
    # During a young excursion (an episode, most likely) the model barely
    # learns, or the episode's end would look like an episode of its own.
    weight = params.outlier_weight if excursion else 1.0
    # A young model's spread is the plain mean of its first residuals: it
    # starts at zero, and creeping up from there would make every window an
    # excursion, which learns too little to ever catch up (seen at 10^8).
    young = history < YOUNG_WINDOWS
    spread_weight = 1.0 if young else weight
    rate = 1.0 / history if young else params.spread_alpha
    level = state.level
    level_residual = _learn_spread(
        state, _FIELDS["level"], value - level, rate * spread_weight, params
    )
    state.level = level + params.alpha * weight * level_residual
    for name, centre in seasonal.items():
        fields = _FIELDS[name]
        if not getattr(state, fields.spread):
            # A seasonal predictor's first window: it starts from the
            # level's spread and error, and must earn its preference.
            setattr(state, fields.spread, state.level_spread)
            setattr(state, fields.error, state.level_error)
        residual = _learn_spread(
            state, fields, value - centre, params.spread_alpha * weight, params
        )
        offset = getattr(state, fields.offset)
        setattr(state, fields.offset, offset + params.alpha * weight * residual)
    return False


def _learn_spread(
    state: ModelState,
    fields: _Fields,
    residual: float,
    rate: float,
    params: ModelParams,
) -> float:
    """Update one predictor's spread and error; return the clipped residual."""
    spread = getattr(state, fields.spread)
    error = getattr(state, fields.error)
    limit = params.clip_sigma * _sigma(spread)
    clipped = clip(residual, limit)
    setattr(state, fields.spread, spread + rate * (abs(clipped) - spread))
    setattr(state, fields.error, error + params.error_alpha * (abs(residual) - error))
    return clipped


def predictor_in_use(
    state: ModelState, params: ModelParams, window_start: int, window_ms: int
) -> str:
    """Which predictor `predict` uses for the window: "level", "season" (the
    daily memory, or the one `seasonality` names) or "week" (auto's weekly
    memory)."""
    if state.history == 0:
        return "level"
    memories = _memories(params, window_ms)
    return _chosen(state, params, _seasonal_roots(state, memories, window_start))


def _chosen(state: ModelState, params: ModelParams, seasonal: dict[str, float]) -> str:
    """The predictor in use: "level", "season" (the main seasonal memory) or
    "week" (the automatic weekly one).

    Each seasonal predictor, daily before weekly, replaces the one chosen so
    far while its error is below a ratio of that one's:
    `seasonal_choice_ratio` against the level (a season must predict
    clearly better than no season), `weekly_choice_ratio` for the weekly
    season against the daily one (a week must predict better than a day),
    so a series with no weekly pattern keeps its daily choice.
    """
    best = "level"
    best_error = state.level_error
    for name in seasonal:
        if not getattr(state, _FIELDS[name].spread):
            # Its first window: nothing learned, nothing earned. Its zero
            # error would beat any other, and its zero spread would make
            # the window's deviation thousands of spreads.
            continue
        error = getattr(state, _FIELDS[name].error)
        ratio = (
            params.weekly_choice_ratio
            if best == "season"
            else params.seasonal_choice_ratio
        )
        if error < ratio * best_error:
            best = name
            best_error = error
    return best


@dataclasses.dataclass(frozen=True)
class _Memory:
    """One seasonal memory: a ring of slots over `seasons` seasons.

    `name` is its predictor's, and its fields in `ModelState` are that
    predictor's `_FIELDS`. A slot covers `slot_ms` (one window or several:
    then it holds their mean root). Its prediction is the median of the
    slot's last `past` seasons, with `neighbours` slots on each side of it
    in each of those seasons and, once all are known, the last `neighbours`
    slots (see `reach`); it predicts once `min_known` of the slot's own
    values are known.
    """

    name: str
    season_ms: int
    slot_ms: int
    seasons: int
    past: int
    min_known: int = 1
    neighbours: int = 0

    @functools.cached_property
    def slots(self) -> int:
        """Slots per season."""
        return self.season_ms // self.slot_ms

    @functools.cached_property
    def size(self) -> int:
        """Slots in the ring."""
        return self.slots * self.seasons

    @functools.cached_property
    def lags(self) -> tuple[int, ...]:
        """How many slots back the past seasons' slots are, newest first."""
        return tuple(k * self.slots for k in range(1, self.past + 1))

    @functools.cached_property
    def reach(self) -> tuple[int, ...]:
        """How many slots back every value of the median is, once every
        past season is known at the slot: `seasonal_reach`, then the last
        `neighbours` slots.

        The recent slots are a few among many: they move the median only
        where the seasons disagree at this time of day, and then they side
        with what the query is doing now (measured: the seasons' values
        alone gave a less stable gain, see docs/detector-research.md).
        With fewer seasons known they would weigh too much: a square wave's
        edge on its third day would be predicted from before the edge.
        """
        return (*self.seasonal_reach, *range(1, self.neighbours + 1))

    @functools.cached_property
    def seasonal_reach(self) -> tuple[int, ...]:
        """How many slots back each past season's slot and its `neighbours`
        on either side are. All are in the past (a neighbour ahead of a
        season-old slot is less than a season old, never the window's), and
        none is beyond the ring: the oldest season's older side is gone
        (the ring's slots there hold the last few windows)."""
        return tuple(
            lag + step
            for lag in self.lags
            for step in range(-self.neighbours, self.neighbours + 1)
            if lag + step <= self.size
        )

    @functools.cached_property
    def fields(self) -> _Fields:
        """Its fields in `ModelState`: its ring, offset, spread and error."""
        return _FIELDS[self.name]


class _MemoriesAt(NamedTuple):
    """`_memories`' answer for one params object and window size."""

    params: ModelParams | None
    window_ms: int
    memories: tuple[_Memory, ...]


# The last answer of `_memories`, matched by identity: a series is folded
# with one params object, and hashing that dataclass per window cost more
# than the rest of the lookup. One tuple, so a thread sees an entry whole.
_last_memories = _MemoriesAt(None, 0, ())


def _memories(params: ModelParams, window_ms: int) -> tuple[_Memory, ...]:
    """The seasonal memories tried at this window size, daily first."""
    global _last_memories
    last = _last_memories
    if last.params is params and last.window_ms == window_ms:
        return last.memories
    memories = _memories_of(params, window_ms)
    _last_memories = _MemoriesAt(params, window_ms, memories)
    return memories


# Cached: the same for every query.
@functools.cache
def _memories_of(params: ModelParams, window_ms: int) -> tuple[_Memory, ...]:
    """`_memories`, looked up by value."""
    memories = []
    season_ms = SEASON_MS[params.seasonality]
    periods = params.seasonal_periods
    if season_ms and window_ms < season_ms:
        # A quarter of a season's slots at most: with long windows, more
        # would blur the season's own shape away.
        reach = (season_ms // window_ms - 1) // 4
        neighbours = min(params.seasonal_neighbours, reach)
        memories.append(
            _Memory(
                "season", season_ms, window_ms, periods, periods, neighbours=neighbours
            )
        )
    if params.seasonality == "auto" and window_ms < WEEK_MS:
        # Whole windows per slot, so that a window never spans two slots.
        per_slot = max(1, params.weekly_slot_minutes * MINUTE_MS // window_ms)
        # A slot of several windows is filled during the week that follows
        # the ring's oldest season: one season more keeps that partial week
        # out of the median, which must see only past weeks' slots.
        extra = 1 if per_slot > 1 else 0
        memories.append(
            _Memory(
                "week",
                WEEK_MS,
                per_slot * window_ms,
                periods + extra,
                periods,
                WEEKLY_MIN_KNOWN,
            )
        )
    return tuple(memories)


def _seasonal_roots(
    state: ModelState, memories: tuple[_Memory, ...], window_start: int
) -> dict[str, float]:
    """Each seasonal predictor's root for the window, by name, where known:
    the median of the slot's roots (and its neighbours') over the remembered
    seasons, plus offset. A memory predicts once the slot itself is known in
    `min_known` seasons: a neighbour alone is not the slot."""
    roots = {}
    for memory in memories:
        ring = getattr(state, memory.fields.roots)
        size = memory.size
        if len(ring) != size:
            continue  # none yet, or kept at another window size
        index = window_start // memory.slot_ms
        # `past == past`: not NaN (unknown), without a call per slot.
        own = [
            past for lag in memory.lags if (past := ring[(index - lag) % size]) == past
        ]
        if len(own) < memory.min_known:
            continue
        if memory.neighbours:
            reach = memory.reach if len(own) == memory.past else memory.seasonal_reach
            own = [
                past for back in reach if (past := ring[(index - back) % size]) == past
            ]
        offset = getattr(state, memory.fields.offset)
        roots[memory.name] = _median(own) + offset
    return roots


def _median(values: list[float]) -> float:
    """`statistics.median`, with its arithmetic, of a slot's few values
    (sorted in place): the library's generality cost more than the sort."""
    values.sort()
    half = len(values) // 2
    if len(values) % 2:
        return values[half]
    return (values[half - 1] + values[half]) / 2


def _remember(
    state: ModelState,
    memories: tuple[_Memory, ...],
    window_start: int,
    window_ms: int,
    value: float,
) -> None:
    for memory in memories:
        ring = getattr(state, memory.fields.roots)
        size = memory.size
        if len(ring) != size:
            # A new memory, or one kept at another window size: start afresh.
            del ring[:]
            ring.extend([math.nan] * size)
        slot = (window_start // memory.slot_ms) % size
        # The seasonal median is taken against the offset at the time.
        entry = value - getattr(state, memory.fields.offset)
        # The window's place in its slot: the first one replaces what the
        # slot held a ring ago, later ones fold into the slot's mean.
        position = (window_start % memory.slot_ms) // window_ms
        if position:
            held = ring[slot]
            if not math.isnan(held):
                entry = held + (entry - held) / (position + 1)
        ring[slot] = entry


def _forget_skipped(
    state: ModelState,
    memories: tuple[_Memory, ...],
    window_start: int,
    window_ms: int,
    history: int,
) -> None:
    """Windows skipped since the last fold (an idle query) are unknown, not
    whatever their slots held a season or more ago. `history` is the
    model's."""
    first_ms = state.last_window_start + window_ms
    if not history or first_ms == window_start:
        return  # the usual case: no window skipped
    for memory in memories:
        ring = getattr(state, memory.fields.roots)
        if len(ring) != memory.size:
            continue
        # Slots that begin in the gap; one partly folded before it keeps
        # the mean of its windows so far.
        first = -(-first_ms // memory.slot_ms)
        last = -(-window_start // memory.slot_ms)
        for index in range(first, min(last, first + memory.size)):
            ring[index % memory.size] = math.nan


def _excursion(run: int, z: float, params: ModelParams) -> int:
    """The signed excursion run length after a window with deviation `z`."""
    if run > 0 and z > params.excursion_exit_sigma:
        return run + 1
    if run < 0 and z < -params.excursion_exit_sigma:
        return run - 1
    if abs(z) > params.excursion_sigma:
        return 1 if z > 0 else -1
    return 0

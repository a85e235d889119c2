"""Tunable parameters of the Zeitgeist transforms, with their defaults.

Each transform takes its own frozen dataclass, so a job that uses only the
window counter needs to know nothing of the model. `configs/zeitgeist.yaml`
mirrors these names section by section.
"""

import dataclasses
import uuid

from apache_beam.transforms.window import GlobalWindow

from transforms.millwheel.lateness import LateDataPolicy
from transforms.millwheel.typed_params import check_field_types
from transforms.records.parse import MAX_EVENT_TIME, MAX_EVENT_TIME_MS

MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
# The latest instant a window may end at: Beam keeps timestamps in int64
# microseconds, and the counter's timers and outputs are stamped with
# window ends (a later one fails in a worker with an OverflowError).
LAST_WINDOW_END_MS = GlobalWindow().max_timestamp().micros // 1000


@dataclasses.dataclass(frozen=True)
class WindowParams:
    """How searches are bucketed into event-time windows.

    `activity_horizon_windows`: a query keeps producing (possibly zero-count)
    windows for this many windows after its last search, so that a dip to
    zero is visible; then its timer loop stops.
    """

    size_ms: int = 5 * MINUTE_MS
    activity_horizon_windows: int = 12
    late_data: LateDataPolicy = LateDataPolicy()

    def __post_init__(self) -> None:
        if isinstance(self.late_data, str):  # "drop" or "correct"
            object.__setattr__(self, "late_data", LateDataPolicy(self.late_data))
        check_field_types(self, "window")
        if self.size_ms <= 0:
            raise ValueError(f"window size must be positive, got {self.size_ms} ms")
        if self.activity_horizon_windows < 0:
            raise ValueError("activity_horizon_windows must be >= 0")
        self._check_windows_end_in_time()

    def _check_windows_end_in_time(self) -> None:
        """The window of a search at the latest event time accepted, and the
        windows of its activity horizon after it, must end by
        `LAST_WINDOW_END_MS`."""
        windows = self.activity_horizon_windows + 1
        largest = (LAST_WINDOW_END_MS - MAX_EVENT_TIME_MS) // windows
        if self.size_ms > largest:
            raise ValueError(
                f"window size must be at most {largest} ms with "
                f"{self.activity_horizon_windows} windows of activity horizon, "
                f"got {self.size_ms} ms: the window of a search at "
                f"{MAX_EVENT_TIME:%Y-%m-%d}, the latest event time accepted, "
                "and the horizon's windows after it must end by the end of "
                f"Beam's global window ({LAST_WINDOW_END_MS} ms)"
            )


@dataclasses.dataclass(frozen=True)
class ModelParams:
    """Per-query model of the counts on the square-root scale.

    Two predictors run side by side: an exponentially weighted level
    (weight `alpha` for the newest window) and a seasonal one, the median
    of the same slot in the last `seasonal_periods` seasons plus an offset.
    Each keeps its spread (mean absolute residual, clipped at `clip_sigma`
    spreads, weight `spread_alpha`) and its unclipped mean absolute error
    (weight `error_alpha`); the seasonal one is used while its error is
    below `seasonal_choice_ratio` times the level's. `seasonality` is the
    season tried: "daily", "weekly", "none", or "auto": a daily and a
    weekly memory side by side, the weekly one used while its error is below
    `weekly_choice_ratio` times the daily one's (or, where the level is in
    use, `seasonal_choice_ratio` times the level's). The
    automatic weekly memory keeps one slot per `weekly_slot_minutes` (or per
    window, if longer), the mean of its windows: a week of 5-minute windows
    would be 2016 slots a season in every query's state, and the hour's
    mean is also less noisy than one window (a weekly pattern is a slow one).
    The main memory's median takes, in each remembered season, the slot's
    `seasonal_neighbours` neighbours on each side too (at most a quarter
    of a season's slots in all), and, once every season is known, the last
    `seasonal_neighbours` windows: three values of one slot are a noisy
    prediction, and a season's shape changes little over a few windows.

    A run of windows that starts beyond `excursion_sigma` spreads (and goes
    on while beyond `excursion_exit_sigma`, same side) is an excursion: for
    its first `max_excursion_windows` windows the model learns with weight
    `outlier_weight` (an episode must not become the new normal, or its end
    would look like a dip); after that the run's mean shift is adopted.
    """

    alpha: float = 0.25
    spread_alpha: float = 0.02
    error_alpha: float = 0.02
    clip_sigma: float = 4.0
    outlier_weight: float = 0.05
    excursion_sigma: float = 2.5
    excursion_exit_sigma: float = 2.5
    max_excursion_windows: int = 24
    seasonality: str = "auto"
    seasonal_periods: int = 3
    seasonal_neighbours: int = 4
    seasonal_choice_ratio: float = 0.8
    weekly_choice_ratio: float = 0.9
    weekly_slot_minutes: int = 60

    def __post_init__(self) -> None:
        check_field_types(self, "model")
        for name in (
            "alpha",
            "spread_alpha",
            "error_alpha",
            "outlier_weight",
            "seasonal_choice_ratio",
            "weekly_choice_ratio",
        ):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"model.{name} must be in (0, 1], got {value}")
        if self.seasonality not in SEASON_MS:
            choices = ", ".join(SEASON_MS)
            raise ValueError(
                f"unknown seasonality {self.seasonality!r}; expected one of: {choices}"
            )
        for name in ("clip_sigma", "excursion_sigma", "excursion_exit_sigma"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be > 0, got {getattr(self, name)}")
        if self.seasonal_neighbours < 0:
            raise ValueError(
                "model.seasonal_neighbours must be >= 0, "
                f"got {self.seasonal_neighbours}"
            )
        if (
            self.seasonal_periods < 1
            or self.max_excursion_windows < 1
            or self.weekly_slot_minutes < 1
        ):
            raise ValueError(
                "model.seasonal_periods, max_excursion_windows and "
                "weekly_slot_minutes must be >= 1"
            )


WEEK_MS = 7 * DAY_MS
# The season of the main seasonal memory; "auto" adds a weekly one beside it.
SEASON_MS = {"auto": DAY_MS, "none": 0, "daily": DAY_MS, "weekly": WEEK_MS}


@dataclasses.dataclass(frozen=True)
class DetectorParams:
    """Evidence accumulation, as the paper's UpdateConfidence, and episodes.

    Each window's deviation z (the model's, in spreads of noise, clipped at
    `max_deviation_sigma` so that one burst alone cannot raise an alert)
    adds ``z - slack_sigma`` to the spike evidence and ``-z - slack_sigma``
    to the dip evidence, neither going below zero. The evidence is divided
    by ``1 + burst_tolerance * m``, m being its own mean over about
    `evidence_memory_windows` windows: bursty queries need more to alert.
    With `far_surprise`, a window beyond `max_deviation_sigma` adds at most
    its surprise for the query beyond the slack: the clip is
    ``min(max_deviation_sigma, slack_sigma - ln s)``, s being the share of
    the query's windows that went that far, over about
    `evidence_memory_windows` (a query that bursts every few hours gets
    little from one more burst; one that never did gets the full clip).
    An episode opens when that passes `threshold`, and closes after
    `close_after_windows` windows in a row below half of it. Dips need an
    expected count of at least `min_expected_for_dip`. The detector stays
    quiet until the model has seen `min_history_windows`.

    A lone window opens an episode alone when its deviation (from the
    closest of the model's predictors) beats `lone_sigma` (0: never) and
    `lone_ratio` times the query's far tail: the largest such deviation
    seen, halving every `lone_half_life_hours`; not before the detector
    has judged the query for `lone_warmup_hours`.

    A window beyond every count the query has had (above its highest, or
    below its lowest) opens an episode when its deviation beats
    `extreme_sigma` (0: never) on its side, the query's expected count is
    at least `extreme_min_expected` (a record of a few searches is one
    search away), and the detector has judged the query for
    `lone_warmup_hours`; or, with `extreme_margin` > 0, when it breaks the
    record by more than that share of the query's range (highest less
    lowest count) and its deviation beats `slack_sigma`. With `novel_margin`
    > 0, a window whose count is further than that share of the range from
    every count the query has had (inside the range as beyond it) opens an
    episode on the same terms as a record beyond `extreme_sigma`; off with
    `extreme_sigma` 0.

    With `max_autocorrelation` > 0 every rule above but the lone window's
    judges a window's innovation instead of its deviation: the deviation
    less rho times the previous window's, over ``sqrt(1 - rho^2)``, rho
    being the query's lag-one autocorrelation of deviations (learned over
    about `evidence_memory_windows` windows, at most `max_autocorrelation`).
    """

    slack_sigma: float = 1.0
    threshold: float = 5.0
    max_deviation_sigma: float = 6.0
    burst_tolerance: float = 3.0
    evidence_memory_windows: int = 2000
    close_after_windows: int = 16
    min_expected_for_dip: float = 5.0
    min_expected_for_spike: float = 0.0
    min_history_windows: int = 12
    lone_sigma: float = 6.0
    lone_half_life_hours: float = 168.0
    lone_warmup_hours: float = 24.0
    lone_ratio: float = 1.3
    extreme_sigma: float = 4.0
    extreme_min_expected: float = 20.0
    extreme_margin: float = 0.25
    far_surprise: bool = True
    max_autocorrelation: float = 0.3
    novel_margin: float = 0.05

    def __post_init__(self) -> None:
        check_field_types(self, "detector")
        if not 0 <= self.max_autocorrelation < 1:
            raise ValueError(
                "detector.max_autocorrelation must be in [0, 1), got "
                f"{self.max_autocorrelation}"
            )
        if (
            min(
                self.extreme_sigma,
                self.extreme_min_expected,
                self.extreme_margin,
                self.novel_margin,
            )
            < 0
        ):
            raise ValueError(
                "detector.extreme_sigma, extreme_min_expected, extreme_margin"
                " and novel_margin must be >= 0"
            )
        if self.lone_sigma < 0 or self.lone_warmup_hours < 0:
            raise ValueError("detector.lone_sigma and lone_warmup_hours must be >= 0")
        if self.lone_half_life_hours <= 0 or self.lone_ratio <= 0:
            raise ValueError("detector.lone_half_life_hours and lone_ratio must be > 0")
        if self.threshold <= 0:
            raise ValueError(f"detector.threshold must be > 0, got {self.threshold}")
        if self.slack_sigma < 0 or self.burst_tolerance < 0:
            raise ValueError("detector.slack_sigma and burst_tolerance must be >= 0")
        if self.max_deviation_sigma <= self.slack_sigma:
            # A window would never add evidence: only the single-window rules
            # could alert, and nothing would say so.
            raise ValueError(
                "detector.max_deviation_sigma must be above slack_sigma, got "
                f"{self.max_deviation_sigma} and {self.slack_sigma}"
            )
        if (
            min(
                self.min_expected_for_dip,
                self.min_expected_for_spike,
                self.min_history_windows,
            )
            < 0
        ):
            raise ValueError(
                "detector.min_expected_for_dip, min_expected_for_spike and "
                "min_history_windows must be >= 0"
            )
        if self.evidence_memory_windows < 1 or self.close_after_windows < 1:
            raise ValueError(
                "detector.evidence_memory_windows and close_after_windows must be >= 1"
            )


@dataclasses.dataclass(frozen=True)
class ModelStoreConfig:
    """Where the models live, and which run writes them.

    Pickled with the DoFn; clients are made in `DoFn.setup`.
    ``BIGTABLE_EMULATOR_HOST`` in a worker's environment redirects them to an
    emulator. ``run_id`` names this pipeline run: make one config per run
    (the default is a fresh random id) and share it with every worker.
    """

    project: str
    instance: str
    table: str = "models"
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

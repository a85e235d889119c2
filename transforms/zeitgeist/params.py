"""Tunable parameters of the Zeitgeist transforms, with their defaults.

Each transform takes its own frozen dataclass, so a job that uses only the
window counter needs to know nothing of the model. `configs/zeitgeist.yaml`
mirrors these names section by section.
"""

import dataclasses
import uuid

from transforms.millwheel.lateness import LateDataPolicy

MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS


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
        if self.size_ms <= 0:
            raise ValueError(f"window size must be positive, got {self.size_ms} ms")
        if self.activity_horizon_windows < 0:
            raise ValueError("activity_horizon_windows must be >= 0")


@dataclasses.dataclass(frozen=True)
class ModelParams:
    """Exponentially weighted level/trend/variance model per query.

    `alpha`, `beta` and `variance_alpha` weight the newest window in the level,
    trend and variance. A run of windows that starts beyond
    `excursion_sigma` standard deviations (and continues while beyond
    `excursion_exit_sigma`, same side) is an excursion: for its first
    `max_excursion_windows` windows observations are clipped to
    `robust_clip_sigma` and weighted by `outlier_weight`, so an episode
    barely moves the model (else its end would look like a dip) while a
    lasting shift is learned once it has lasted. `seasonality` is "none", "daily" or
    "weekly"; its factors learn at rate `seasonal_alpha`.
    """

    alpha: float = 0.25
    beta: float = 0.02
    trend_damping: float = 0.9
    variance_alpha: float = 0.05
    robust_clip_sigma: float = 3.0
    outlier_weight: float = 0.05
    excursion_sigma: float = 3.0
    excursion_exit_sigma: float = 1.5
    max_excursion_windows: int = 24
    seasonality: str = "none"
    seasonal_alpha: float = 0.2

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "variance_alpha", "seasonal_alpha"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"model.{name} must be in (0, 1], got {value}")
        if not 0.0 <= self.trend_damping <= 1.0:
            raise ValueError("model.trend_damping must be in [0, 1]")
        if self.seasonality not in SEASON_MS:
            choices = ", ".join(SEASON_MS)
            raise ValueError(
                f"unknown seasonality {self.seasonality!r}; expected one of: {choices}"
            )


SEASON_MS = {"none": 0, "daily": DAY_MS, "weekly": 7 * DAY_MS}


@dataclasses.dataclass(frozen=True)
class DetectorParams:
    """CUSUM-style confidence accumulation, as the paper's UpdateConfidence.

    Each window adds ``|z| - slack_sigma`` to the spike (z > 0) or dip (z < 0)
    confidence, which never drops below zero; an anomaly is reported while a
    confidence exceeds `threshold`. Dips need an expected count of at least
    `min_expected_for_dip`: the absence of a handful of searches is noise.
    The detector stays quiet until the model has seen `min_history_windows`.
    """

    slack_sigma: float = 1.0
    threshold: float = 4.0
    min_expected_for_dip: float = 5.0
    min_expected_for_spike: float = 0.0
    min_history_windows: int = 12
    # Confidence is capped so that it drains within a few windows once an
    # episode is over.
    max_confidence_factor: float = 2.0

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise ValueError(f"detector.threshold must be > 0, got {self.threshold}")
        if self.slack_sigma < 0:
            raise ValueError("detector.slack_sigma must be >= 0")


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

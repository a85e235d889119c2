"""What the synthetic Zeitgeist stream simulates: `StreamSpec` and its time units.

Kept apart from the simulation because the spec is the whole parameter
surface: it is validated when built, so an invalid combination fails at
construction rather than mid-generation, and what a stream may contain can
be read here without reading how it is drawn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
# 2026-01-05T00:00:00Z is a Monday, so daily and weekly profiles start aligned.
DEFAULT_START_MS = 1_767_571_200_000


@dataclass(frozen=True)
class StreamSpec:
    """What to simulate. Times are epoch milliseconds; rates are per window.

    `start_ms` and `duration_ms` must be multiples of `window_ms` so that the
    generator's windows are exactly Beam's epoch-aligned `FixedWindows`.
    """

    num_queries: int = 100
    start_ms: int = DEFAULT_START_MS
    duration_ms: int = 3 * DAY_MS
    window_ms: int = 5 * MINUTE_MS
    # Expected events per window of the most popular query; rank r gets
    # base_rate / r**zipf_exponent, never less than min_rate.
    base_rate: float = 400.0
    zipf_exponent: float = 1.0
    min_rate: float = 2.0
    # Daily sine amplitude as a fraction of the rate; the phase is per query.
    seasonality: float = 0.4
    # Multiplicative change per day, with a random sign per query.
    drift_per_day: float = 0.05
    # Mean number of episodes per query per day after the warm-up.
    episodes_per_query_day: float = 1.0
    episode_windows: tuple[int, int] = (3, 12)
    magnitude_sigma: tuple[float, float] = (4.0, 8.0)
    dip_fraction: float = 0.5
    # Dips go only where every window of the episode expects at least this
    # much; elsewhere the episode is injected as a spike.
    min_dip_expected: float = 20.0
    # Quiet windows kept between two episodes of the same query, so that
    # detections of one are never credited to the other.
    episode_gap_windows: int = 12
    warmup_ms: int = 12 * HOUR_MS
    # Fraction of (query, window) cells emitted as one record with count=N.
    aggregate: float = 0.0
    out_of_order_fraction: float = 0.0
    max_out_of_order_ms: int = MINUTE_MS
    watermark_lag_ms: int = 2 * MINUTE_MS
    late_fraction: float = 0.0
    late_delay_ms: tuple[int, int] = (15 * MINUTE_MS, HOUR_MS)
    duplicate_fraction: float = 0.0

    def __post_init__(self) -> None:
        for ok, message in self._checks():
            if not ok:
                raise ValueError(f"invalid StreamSpec: {message}")

    def _checks(self) -> list[tuple[bool, str]]:
        fractions = (
            "dip_fraction",
            "aggregate",
            "out_of_order_fraction",
            "late_fraction",
            "duplicate_fraction",
        )
        return [
            (
                min(self.num_queries, self.window_ms, self.duration_ms) > 0,
                "num_queries, window_ms and duration_ms must be positive",
            ),
            (
                self.start_ms % self.window_ms == 0
                and self.duration_ms % self.window_ms == 0,
                "start_ms and duration_ms must be multiples of window_ms",
            ),
            (0 <= self.seasonality < 1, "seasonality must be in [0, 1)"),
            (
                min(self.min_rate, self.base_rate, self.episodes_per_query_day) >= 0,
                "rates must be >= 0",
            ),
            (
                1 <= self.episode_windows[0] <= self.episode_windows[1],
                "episode_windows must be an ordered range of at least 1",
            ),
            (
                0 < self.magnitude_sigma[0] <= self.magnitude_sigma[1],
                "magnitude_sigma must be an ordered positive range",
            ),
            *(
                (0 <= getattr(self, f) <= 1, f"{f} must be in [0, 1]")
                for f in fractions
            ),
            (
                self.out_of_order_fraction + self.late_fraction <= 1,
                "out_of_order_fraction + late_fraction must be <= 1",
            ),
            (
                self.out_of_order_fraction == 0 or self.max_out_of_order_ms > 0,
                "out-of-order records need max_out_of_order_ms > 0",
            ),
            (
                0 <= self.max_out_of_order_ms <= self.watermark_lag_ms
                and self.watermark_lag_ms < self.late_delay_ms[0]
                and self.late_delay_ms[0] <= self.late_delay_ms[1],
                "need max_out_of_order_ms <= watermark_lag_ms < late_delay_ms[0]"
                " <= late_delay_ms[1]",
            ),
        ]

    @property
    def num_windows(self) -> int:
        return self.duration_ms // self.window_ms

    def quiet(self) -> StreamSpec:
        """The same traffic without episodes, for measuring false alarms."""
        return dataclasses.replace(self, episodes_per_query_day=0.0)

"""Expected searches per (query, window): baseline traffic and injected episodes.

The ground truth is decided here, before any record exists: episodes are
placed on the expected counts, so the realised counts of an episode are
still Poisson noise around a known shift, and the evaluator scores against
exactly what was injected.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from testing.zeitgeist_spec import DAY_MS, StreamSpec
from testing.zeitgeist_stream import DIP, SPIKE, Episode

_PLACEMENT_ATTEMPTS = 20


def expected_baseline(spec: StreamSpec, rng: np.random.Generator) -> np.ndarray:
    """Expected count per (query, window) before episodes."""
    ranks = np.arange(1, spec.num_queries + 1)
    rate = np.maximum(spec.base_rate / ranks**spec.zipf_exponent, spec.min_rate)
    phase = rng.uniform(0.0, 2 * np.pi, spec.num_queries)
    sign = rng.choice([-1.0, 1.0], spec.num_queries)
    # Window midpoints, so a window's level is its average rather than its edge.
    mid = spec.start_ms + (np.arange(spec.num_windows) + 0.5) * spec.window_ms
    angle = 2 * np.pi * (mid % DAY_MS) / DAY_MS
    season = 1 + spec.seasonality * np.sin(angle[None, :] + phase[:, None])
    days = (mid - spec.start_ms) / DAY_MS
    drift = (1 + spec.drift_per_day) ** (sign[:, None] * days[None, :])
    return rate[:, None] * season * drift


def inject_episodes(
    spec: StreamSpec,
    baseline: np.ndarray,
    names: tuple[str, ...],
    rng: np.random.Generator,
) -> tuple[list[Episode], np.ndarray]:
    expected = baseline.copy()
    episodes = []
    for q, name in enumerate(names):
        for start, end, dip, magnitude in _place_episodes(spec, baseline[q], rng):
            base = baseline[q, start:end]
            sigma = np.sqrt(base)
            if dip:
                expected[q, start:end] = np.maximum(base - magnitude * sigma, 0.0)
                magnitude = float(np.min((base - expected[q, start:end]) / sigma))
            else:
                expected[q, start:end] = base + magnitude * sigma
            episodes.append(
                Episode(
                    query=name,
                    kind=DIP if dip else SPIKE,
                    start_ms=spec.start_ms + start * spec.window_ms,
                    end_ms=spec.start_ms + end * spec.window_ms,
                    magnitude_sigma=magnitude,
                )
            )
    episodes.sort(key=lambda e: (e.start_ms, e.query))
    return episodes, expected


def _place_episodes(
    spec: StreamSpec, baseline: np.ndarray, rng: np.random.Generator
) -> list[tuple[int, int, bool, float]]:
    """(start window, end window, is dip, magnitude) for one query, by start."""
    first = -(-spec.warmup_ms // spec.window_ms)
    eligible_days = max(spec.num_windows - first, 0) * spec.window_ms / DAY_MS
    shortest, longest = spec.episode_windows
    placed: list[tuple[int, int, bool, float]] = []
    for _ in range(rng.poisson(spec.episodes_per_query_day * eligible_days)):
        # Rejection sampling keeps episodes apart; a crowded query just gets
        # fewer of them.
        for _ in range(_PLACEMENT_ATTEMPTS):
            length = int(rng.integers(shortest, longest + 1))
            starts = np.arange(first, spec.num_windows - length + 1)
            if starts.size == 0:
                break
            dip = bool(rng.random() < spec.dip_fraction)
            if dip:
                lowest = sliding_window_view(baseline, length).min(axis=1)[starts]
                dip_starts = starts[lowest >= spec.min_dip_expected]
                # A query too quiet for a dip of this length gets a spike.
                dip = dip_starts.size > 0
                starts = dip_starts if dip else starts
            start = int(rng.choice(starts))
            end = start + length
            gap = spec.episode_gap_windows
            if all(end + gap <= s or e + gap <= start for s, e, _, _ in placed):
                magnitude = float(rng.uniform(*spec.magnitude_sigma))
                placed.append((start, end, dip, magnitude))
                break
    return sorted(placed)

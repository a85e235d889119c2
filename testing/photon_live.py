"""Generated Photon logs played in real time, for live demos and the
streaming benchmark.

`live_logs(rate, minutes, ...)` generates query and click logs
(`testing.photon_generator`) that start now, with about `rate` click
records a second, and the generator's troubles on a live scale: clicks
within seconds of their query, a fifth of the queries logged up to 10 s
late (after some of their clicks), duplicated clicks re-logged up to two
minutes later, and orphan clicks. `feeds` plays them into two directories,
`queries/` and `clicks/`, through a `testing.live_player.LivePlayer`.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from testing.live_player import Feed
from testing.photon_generator import PhotonLogs, PhotonSpec, generate
from transforms.records.readers import json_line

# Live delays: seconds, where the generator's defaults are minutes of a log day.
_MAX_CLICK_DELAY_MS = 5_000
_MAX_QUERY_LOG_DELAY_MS = 10_000
_MAX_CLICK_LOG_DELAY_MS = 1_000


def live_logs(
    rate: float,
    minutes: float,
    seed: int,
    now_ms: int | None = None,
    id_prefix: str = "",
    **troubles,
) -> PhotonLogs:
    """Logs of about `rate` click records a second for `minutes`, from
    `now_ms` (the wall clock by default), their ids starting with
    `id_prefix`; `troubles` are `PhotonSpec`'s fractions
    (`duplicate_fraction`, `orphan_fraction`, `late_query_fraction`)."""
    if rate <= 0 or minutes <= 0:
        raise ValueError(f"rate and minutes must be positive, got {rate}, {minutes}")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    duration_ms = max(1, round(minutes * 60_000))
    shape = PhotonSpec(
        start_ms=now_ms,
        duration_ms=duration_ms,
        max_click_delay_ms=_MAX_CLICK_DELAY_MS,
        max_query_log_delay_ms=_MAX_QUERY_LOG_DELAY_MS,
        max_click_log_delay_ms=_MAX_CLICK_LOG_DELAY_MS,
        id_prefix=id_prefix,
        **troubles,
    )
    clicks = rate * duration_ms / 1000
    spec = dataclasses.replace(
        shape, num_queries=max(1, round(clicks / shape.clicks_per_query))
    )
    return generate(spec, seed)


def feeds(logs: PhotonLogs, directory: pathlib.Path) -> list[Feed]:
    """The query log into `directory/queries`, the click log into
    `directory/clicks`."""

    def writer(records):
        def write(path: pathlib.Path, part: slice) -> None:
            path.write_text("".join(json_line(r) + "\n" for r in records[part]))

        return write

    queries, clicks = feed_directories(directory)
    return [
        Feed(queries, logs.query_arrivals, writer(logs.queries)),
        Feed(clicks, logs.click_arrivals, writer(logs.clicks)),
    ]


def feed_directories(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Where `feeds` plays the query log and the click log."""
    return directory / "queries", directory / "clicks"

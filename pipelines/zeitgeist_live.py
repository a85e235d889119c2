"""Zeitgeist's live runs (`docs/streaming.md`): the live generator and the
status line.

`python -m pipelines.zeitgeist` runs live with `--follow` (files that keep
arriving in `--input`'s directory) or with `--streaming` and no `--input`
(a generated stream played in real time into OUTPUT/generated/live/, which
the job follows like any directory).
"""

from __future__ import annotations

import logging
import pathlib

from pipelines import config as config_loader
from pipelines.live import RECORDS_READ, generator_run

_log = logging.getLogger("pipelines.zeitgeist")

# The live generator's records trail each other by at most a second.
LIVE_DISORDER_SECONDS = 1.0


def start_live_generator(
    config: config_loader.Config, output: pathlib.Path, resume: bool
):
    """Starts playing the configured synthetic stream in real time into
    OUTPUT/generated/live/; returns the stream, its player and the pattern
    to follow.

    A job that `resume`s its checkpoint has read part of the folder: the
    files stay, and this run's stream, from a seed of its own (so its
    record ids are new), is played beside them. A job that starts afresh
    would read an earlier run's files as input: they are deleted first.
    """
    from testing.live_player import LivePlayer
    from testing.zeitgeist_live import live_stream, stream_feed

    folder = output / "generated" / "live"
    settings = config["generator"]
    run = generator_run([folder], resume)
    stream = live_stream(
        rate=float(settings["rate"]),
        window_ms=int(config["window"]["size_seconds"] * 1000),
        minutes=float(settings["live_minutes"]),
        num_queries=int(settings["num_queries"]),
        seed=int(settings["seed"]) + run,
    )
    _log.info(
        "playing %d generated records over %d queries live at about %g/s, "
        "%d episodes, into %s",
        len(stream),
        stream.spec.num_queries,
        float(settings["rate"]),
        len(stream.episodes),
        folder,
    )
    player = LivePlayer([stream_feed(stream, folder)]).start()
    return stream, player, [str(folder / "*.jsonl")]


def write_played_episodes(
    stream, played_through_ms: int, output: pathlib.Path, resume: bool
) -> None:
    """The ground truth of a live run, OUTPUT/generated/episodes.json: the
    episodes it played whole, after those of the runs it resumes (their
    anomalies are in the same outputs)."""
    from testing.zeitgeist_generator import load_episodes, write_episodes
    from testing.zeitgeist_live import episodes_played

    path = output / "generated" / "episodes.json"
    earlier = load_episodes(path) if resume and path.exists() else []
    write_episodes([*earlier, *episodes_played(stream, played_through_ms)], path)


def status_line(totals: dict[str, int], rate: str, watermark: str) -> str:
    """One line on a running job, from its committed batches' counters
    (`totals`, by "namespace/name"), the read `rate`'s text and the
    runner's `watermark` text."""
    records = totals.get(RECORDS_READ, 0)
    opened = totals.get("millwheel.zeitgeist/spikes_detected", 0) + totals.get(
        "millwheel.zeitgeist/dips_detected", 0
    )
    closed = totals.get("millwheel.zeitgeist/episodes_closed", 0)
    return (
        f"{records} records read{rate}, "
        f"{totals.get('millwheel.zeitgeist/windows_emitted', 0)} windows, "
        f"{opened - closed} open episodes, "
        f"{totals.get('millwheel.zeitgeist/late_searches', 0)} late searches"
        f"{watermark}"
    )

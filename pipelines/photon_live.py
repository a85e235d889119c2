"""Photon's live runs (`docs/streaming.md`): the live generator, the status
line, and the check of a live run against what was played.

`python -m pipelines.photon` runs live with `--follow` (query and click logs
that keep arriving in the `--queries` and `--clicks` directories) or with
`--streaming` and no logs (generated logs played in real time into
OUTPUT/generated/live/queries/ and .../clicks/, which the job follows like
any directories).
"""

from __future__ import annotations

import logging
import pathlib

from pipelines import config as config_loader
from pipelines.live import RECORDS_READ, generator_run
from pipelines.outputs import read_output
from pipelines.summary import format_table
from transforms.photon import JOINED
from transforms.records.photon_pb2 import JoinedClick

_log = logging.getLogger("pipelines.photon")

# The live generator's events trail each other by at most a second in each
# log; the queries logged late come after the watermark, and wait in state.
LIVE_DISORDER_SECONDS = 1.0


def start_live_generator(
    config: config_loader.Config, output: pathlib.Path, resume: bool
):
    """Starts playing the configured logs in real time under
    OUTPUT/generated/live/; returns the logs, their player, and the query
    and click patterns to follow.

    A job that `resume`s its checkpoint has read part of the folders: their
    files stay, and this run's logs, from a seed and with ids of their own
    (a click id the job has joined must not come again as a new click), are
    played beside them. A job that starts afresh would read an earlier
    run's files as input: they are deleted first.
    """
    from testing.live_player import LivePlayer
    from testing.photon_live import feed_directories, feeds, live_logs

    folder = output / "generated" / "live"
    settings = config["generator"]
    run = generator_run(feed_directories(folder), resume)
    logs = live_logs(
        rate=float(settings["rate"]),
        minutes=float(settings["live_minutes"]),
        seed=int(settings["seed"]) + run,
        id_prefix=f"r{run}-" if run else "",
        duplicate_fraction=float(settings["duplicate_fraction"]),
        orphan_fraction=float(settings["orphan_fraction"]),
        late_query_fraction=float(settings["late_query_fraction"]),
    )
    played = feeds(logs, folder)
    _log.info(
        "playing %d queries and %d clicks live at about %g clicks/s into %s",
        len(logs.queries),
        len(logs.clicks),
        float(settings["rate"]),
        folder,
    )
    player = LivePlayer(played).start()
    queries, clicks = (str(feed.directory / "*.jsonl") for feed in played)
    return logs, player, [queries], [clicks]


def status_line(totals: dict[str, int], rate: str, watermark: str) -> str:
    """One line on a running job, from its committed batches' counters
    (`totals`, by "namespace/name"), the read `rate`'s text and the
    runner's `watermark` text."""
    records = totals.get(RECORDS_READ, 0)
    photon = {
        name.split("/", 1)[1]: value
        for name, value in totals.items()
        if name.startswith("millwheel.photon/")
    }
    unjoinable = photon.get("unjoinable_query_not_found", 0) + photon.get(
        "unjoinable_older_than_gc_horizon", 0
    )
    return (
        f"{records} records read{rate}, "
        f"{photon.get('clicks_joined', 0)} clicks joined, "
        f"{photon.get('wasted_joins', 0)} wasted, {unjoinable} unjoinable"
        f"{watermark}"
    )


def live_truth_check(output: pathlib.Path, logs, played_through_ms: int) -> str:
    """The written joins against the clicks played: a click is due once it
    and its query have both been played (it may still be in flight). The
    outputs hold the joins of the runs this one resumes too: each click is
    checked to be output once over all of them, and the rest is checked on
    this run's clicks."""
    queries_played = {
        q.query_id
        for q, arrived in zip(logs.queries, logs.query_arrivals, strict=True)
        if arrived <= played_through_ms
    }
    due = {
        c.click_id
        for c, arrived in zip(logs.clicks, logs.click_arrivals, strict=True)
        if arrived <= played_through_ms
        and c.click_id in logs.joinable
        and c.query_id in queries_played
    }
    joined = [j.click.click_id for j in read_output(output, JOINED, JoinedClick)]
    played = {c.click_id for c in logs.clicks}
    # A resumed run's table would otherwise read as the whole job's.
    rows = [
        ("joinable clicks played", len(due)),
        ("joined exactly once", len(due & set(joined))),
        ("not joined yet", len(due - set(joined))),
        ("joined but not joinable", len((set(joined) & played) - set(logs.joinable))),
        ("output more than once, all runs", len(joined) - len(set(joined))),
    ]
    return format_table("Against the clicks this run played", rows)

"""The flags and the `live:` config section of a live run, shared by the
pipeline commands: how a followed input is polled, how its watermark is
estimated, and how often a running job reports."""

from __future__ import annotations

import argparse
import dataclasses
import os

from pipelines import config as config_loader
from transforms.records.after_read import ACTIONS, ARCHIVE, AfterRead
from transforms.records.follow import FollowSettings

# Flag -> config key, for `config_loader.from_command_line`.
FLAG_KEYS = {
    "poll_seconds": "live.poll_seconds",
    "max_disorder_seconds": "live.max_disorder_seconds",
    "idle_timeout_seconds": "live.idle_timeout_seconds",
    "status_seconds": "live.status_seconds",
    "after_read": "live.after_read",
    "archive_dir": "live.archive_dir",
}
# Seconds may be fractional, whatever the default in the YAML file says.
FLOAT_KEYS = (
    *(key for key in FLAG_KEYS.values() if key.endswith("_seconds")),
    "live.flush_seconds",
    "live.settle_seconds",
)


def add_live_arguments(parser: argparse.ArgumentParser, follow_help: str) -> None:
    """`--follow` (described by `follow_help`) and the flags of `FLAG_KEYS`."""
    parser.add_argument("--follow", action="store_true", help=follow_help)
    parser.add_argument("--poll_seconds", type=float, help="live.poll_seconds")
    parser.add_argument(
        "--max_disorder_seconds", type=float, help="live.max_disorder_seconds"
    )
    parser.add_argument(
        "--idle_timeout_seconds", type=float, help="live.idle_timeout_seconds"
    )
    parser.add_argument(
        "--status_seconds", type=float, help="live.status_seconds (0: no status)"
    )
    parser.add_argument(
        "--after_read",
        choices=ACTIONS,
        help="live.after_read: what becomes of a followed file once the batch "
        "that read it is committed (keep, delete, or archive into --archive_dir)",
    )
    parser.add_argument("--archive_dir", help="live.archive_dir")


def disorder_of_generated(
    args: argparse.Namespace, follow: FollowSettings, played_seconds: float
) -> FollowSettings:
    """`follow` for a live generator whose records trail each other by at
    most `played_seconds`: its watermark need wait no longer than that,
    unless the user set `live.max_disorder_seconds` (flag or `--set`)."""
    given = args.max_disorder_seconds is not None or any(
        item.partition("=")[0].strip() == FLAG_KEYS["max_disorder_seconds"]
        for item in args.set
    )
    if given:
        return follow
    return dataclasses.replace(follow, max_disorder_seconds=played_seconds)


def follow_settings(config: config_loader.Config) -> FollowSettings:
    """How a followed input is polled, its watermark estimated, and what
    becomes of its files once read."""
    live = config["live"]
    return FollowSettings(
        poll_seconds=live["poll_seconds"],
        max_disorder_seconds=live["max_disorder_seconds"],
        idle_timeout_seconds=live["idle_timeout_seconds"],
        settle_seconds=live["settle_seconds"],
        after_read=after_read(live),
    )


def after_read(live: dict) -> AfterRead:
    """`live.after_read` and `live.archive_dir` (empty: none), checked: an
    archive directory must exist (a mistyped one would refuse every file)."""
    policy = AfterRead(live["after_read"], live["archive_dir"] or None)
    if policy.action == ARCHIVE and not os.path.isdir(policy.archive_dir):
        raise ValueError(f"--archive_dir {policy.archive_dir!r}: no such directory")
    return policy

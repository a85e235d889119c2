"""Generated records played into directories on the wall clock, as live feeds.

A `Feed` is a directory and records in arrival order, with their arrival
times. `LivePlayer` plays one or more feeds at once: every `tick_seconds`,
the records of each feed whose arrival time has passed become one JSON Lines
file in its directory, written under a hidden name and renamed into place,
so a followed directory (`transforms.records.follow`) sees what a live feed
would send and never a file half written. A followed directory reads each
file name once, so a player numbers its files on from the highest already
in the directory: started again over a folder a job goes on following, it
adds files and never rewrites one. `clear_played` empties a directory of
played files for a job that starts afresh.
"""

from __future__ import annotations

import bisect
import dataclasses
import pathlib
import re
import threading
import time
from collections.abc import Callable, Sequence

_PLAYED = re.compile(r"^live-(\d+)\.jsonl$")


@dataclasses.dataclass(frozen=True)
class Feed:
    """Records to play into `directory`: `arrival_ms` (sorted) says when each
    arrives, and `write(path, part)` writes the records of `part`, a slice
    of them, as one file."""

    directory: pathlib.Path
    arrival_ms: Sequence[int]
    write: Callable[[pathlib.Path, slice], None]


class LivePlayer:
    """Plays `feeds` into their directories as their arrival clocks are
    reached, on a thread of its own, until every record is played or `stop`."""

    def __init__(self, feeds: Sequence[Feed], tick_seconds: float = 0.25) -> None:
        self._feeds = list(feeds)
        self._tick = tick_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._play, name="live-player", daemon=True
        )
        self._played = [0] * len(self._feeds)
        self._files = [0] * len(self._feeds)
        # Every record arriving by this time (wall clock, ms) has been played.
        self.played_through_ms = 0

    @property
    def played(self) -> int:
        """Records written so far, over all feeds."""
        return sum(self._played)

    @property
    def finished(self) -> bool:
        """Whether every record of every feed has been written."""
        return all(
            n == len(feed.arrival_ms)
            for n, feed in zip(self._played, self._feeds, strict=True)
        )

    def start(self) -> LivePlayer:
        for i, feed in enumerate(self._feeds):
            feed.directory.mkdir(parents=True, exist_ok=True)
            self._files[i] = next_file_number(feed.directory)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _play(self) -> None:
        while not self._stop.is_set() and not self.finished:
            now_ms = int(time.time() * 1000)
            for i, feed in enumerate(self._feeds):
                self._play_feed(i, feed, now_ms)
            self.played_through_ms = now_ms
            self._stop.wait(self._tick)

    def _play_feed(self, i: int, feed: Feed, now_ms: int) -> None:
        end = bisect.bisect_right(feed.arrival_ms, now_ms)
        if end <= self._played[i]:
            return
        name = _played_name(self._files[i])
        hidden = feed.directory / f".{name}"
        feed.write(hidden, slice(self._played[i], end))
        hidden.rename(feed.directory / name)
        self._files[i] += 1
        self._played[i] = end


def clear_played(directory: pathlib.Path) -> int:
    """Deletes the files a player wrote into `directory` (whole or half
    written); returns how many it deleted."""
    if not directory.is_dir():
        return 0
    found = [
        path
        for path in directory.iterdir()
        if _PLAYED.match(path.name.removeprefix("."))
    ]
    for path in found:
        path.unlink()
    return len(found)


def next_file_number(directory: pathlib.Path) -> int:
    """The number of the next file a player writes into `directory`: one
    past the highest played there (0 for none)."""
    if not directory.is_dir():
        return 0
    return 1 + max(_played_numbers(directory), default=-1)


def _played_name(number: int) -> str:
    return f"live-{number:08d}.jsonl"


def _played_numbers(directory: pathlib.Path) -> list[int]:
    return [
        int(match.group(1))
        for path in directory.iterdir()
        if (match := _PLAYED.match(path.name))
    ]

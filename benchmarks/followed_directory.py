"""What a poll of a followed directory costs as the files read pile up, and
with the files read cleared (`--after_read delete`).

    python benchmarks/followed_directory.py [--files 1000,14400,100000] [--repeats 5]

The live demo writes up to four files a second into the directory it
follows, so an hour of it leaves 14,400 files. For each size N (real files
in a temporary directory, one search each), one poll of the followed
source (`FollowSearchQueries`' DoFn, as a runner calls it between batches:
the listing, the claims, four new files read), timed `--repeats` times:

- keep (the default): the N files read are still there, and the
  restriction the poll resumes from lists them all;
- cleared (`after_read=delete`): the steady state of a directory whose read
  files are cleared: the four files read at the poll before (deleted by
  this poll) and four new ones, whatever N.

Printed per size and mode: the median poll in ms, and the restriction the
poll leaves, pickled as a checkpoint holds it, in bytes and ms to pickle;
then each size's keep / cleared ratio of poll time. The baseline is the
cleared poll, measured in the same run.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time
from pathlib import Path

from testing import followed_polls
from transforms.records.after_read import AfterRead
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.followed_files import FileVersion, FollowedFiles

NEW_FILES_PER_POLL = 4
T0_MS = 1_767_571_200_000


def write_files(directory: Path, names: list[str]) -> None:
    for name in names:
        (directory / name).write_text(
            f'{{"query": "q", "event_time": {T0_MS}, "record_id": "{name}"}}\n'
        )


def versions(directory: Path, names: list[str]) -> frozenset[FileVersion]:
    return frozenset(
        FileVersion(str(path), path.stat().st_size, path.stat().st_mtime)
        for path in (directory / name for name in names)
    )


def timed_poll(follow: FollowSearchQueries, restriction: FollowedFiles) -> tuple:
    """One poll: its seconds, and the restriction it leaves."""
    started = time.perf_counter()
    records, rest = followed_polls.poll(follow, restriction)
    seconds = time.perf_counter() - started
    assert len(records) == NEW_FILES_PER_POLL, len(records)
    return seconds, rest


def checkpoint_cost(rest: FollowedFiles) -> tuple[int, float]:
    started = time.perf_counter()
    blob = pickle.dumps(rest)
    return len(blob), time.perf_counter() - started


def measure_keep(directory: Path, read: int, repeats: int) -> dict:
    old = [f"read-{i:07d}.jsonl" for i in range(read)]
    new = [f"new-{i}.jsonl" for i in range(NEW_FILES_PER_POLL)]
    write_files(directory, old + new)
    restriction = FollowedFiles(versions(directory, old))
    follow = FollowSearchQueries(str(directory / "*.jsonl"))
    runs = [timed_poll(follow, restriction) for _ in range(repeats)]
    return summary([s for s, _ in runs], runs[-1][1])


def measure_cleared(directory: Path, repeats: int) -> dict:
    before = [f"before-{i}.jsonl" for i in range(NEW_FILES_PER_POLL)]
    new = [f"new-{i}.jsonl" for i in range(NEW_FILES_PER_POLL)]
    write_files(directory, new)
    settings = FollowSettings(after_read=AfterRead("delete"))
    follow = FollowSearchQueries(str(directory / "*.jsonl"), settings=settings)
    runs = []
    for _ in range(repeats):
        write_files(directory, before)  # read and committed at the poll before
        runs.append(timed_poll(follow, FollowedFiles(versions(directory, before))))
    return summary([s for s, _ in runs], runs[-1][1])


def summary(seconds: list[float], rest: FollowedFiles) -> dict:
    size, pickle_s = checkpoint_cost(rest)
    return {
        "poll_ms": statistics.median(seconds) * 1000,
        "checkpoint_bytes": size,
        "pickle_ms": pickle_s * 1000,
        "files_known": len(rest.seen),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="1000,14400,100000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(n) for n in args.files.split(",")]
    print(
        f"{'files read':>10}  {'mode':<8}{'poll ms':>9}{'files known':>13}"
        f"{'checkpoint bytes':>18}{'pickle ms':>11}"
    )
    ratios = []
    for read in sizes:
        results = {}
        for mode in ("keep", "cleared"):
            with tempfile.TemporaryDirectory(prefix="followed_") as tmp:
                if mode == "keep":
                    results[mode] = measure_keep(Path(tmp), read, args.repeats)
                else:
                    results[mode] = measure_cleared(Path(tmp), args.repeats)
            r = results[mode]
            print(
                f"{read:>10,}  {mode:<8}{r['poll_ms']:>9.1f}{r['files_known']:>13,}"
                f"{r['checkpoint_bytes']:>18,}{r['pickle_ms']:>11.1f}"
            )
        ratios.append(
            (read, results["keep"]["poll_ms"] / results["cleared"]["poll_ms"])
        )
    print()
    for read, ratio in ratios:
        print(f"keep / cleared poll time at {read:,} files read: {ratio:.1f}x")


if __name__ == "__main__":
    main()

"""Drop a generated Zeitgeist stream into a directory as files, for a live
(`--follow`) run to pick up.

    python -m testing.zeitgeist_files --days 1 --num_queries 20 --parts 4 INBOX
    python -m testing.zeitgeist_files --parts 48 --every_seconds 5 INBOX

The stream (`testing.zeitgeist_generator`) is cut, in arrival order, into
`--parts` JSON Lines files `part-NNNNN.jsonl`, dropped one every
`--every_seconds`. Each is written under a hidden name and renamed into
place, as a followed directory requires. The ground truth goes to
`INBOX/../<INBOX name>-episodes.json`, outside the followed pattern.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from collections.abc import Sequence

from testing.inbox import cut, drop_file
from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m testing.zeitgeist_files", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "inbox", type=pathlib.Path, help="the directory to drop the files into"
    )
    parser.add_argument(
        "--days", type=float, default=1.0, help="event time the stream covers"
    )
    parser.add_argument(
        "--num_queries", type=int, default=20, help="distinct queries searched"
    )
    parser.add_argument("--seed", type=int, default=7, help="the generator's seed")
    parser.add_argument(
        "--parts", type=int, default=4, help="files the stream is cut into, in order"
    )
    parser.add_argument(
        "--every_seconds",
        type=float,
        default=0.0,
        help="wait between two files (0: drop them all at once)",
    )
    args = parser.parse_args(argv)
    if args.parts < 1:
        parser.error("--parts must be at least 1")
    spec = StreamSpec(num_queries=args.num_queries, duration_ms=int(args.days * DAY_MS))
    stream = generate(spec, seed=args.seed)
    args.inbox.mkdir(parents=True, exist_ok=True)
    stream.write_episodes(args.inbox.parent / f"{args.inbox.name}-episodes.json")
    for i, records in enumerate(cut(stream.events, args.parts)):
        if i and args.every_seconds:
            time.sleep(args.every_seconds)
        drop_file(args.inbox, f"part-{i:05d}.jsonl", records)
        print(f"dropped {args.inbox / f'part-{i:05d}.jsonl'}: {len(records)} records")


if __name__ == "__main__":
    main()

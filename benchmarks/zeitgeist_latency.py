"""Live Zeitgeist: window end to window count and to alert, against Spark
Structured Streaming's windowed count in the same run.

    python benchmarks/zeitgeist_latency.py                  # 2k searches/s
    python benchmarks/zeitgeist_latency.py --rate 20000
    python benchmarks/zeitgeist_latency.py --seconds 600    # memory over 10 min

The live generator (`testing.zeitgeist_live`) plays a stream of `--rate`
searches a second over `--queries` queries, event time = now, with injected
spikes and dips, into a directory as a file every 0.25 s. Zeitgeist follows
that directory (`FollowSearchQueries`, 1 s of disorder allowed, polled every
0.2 s) on SparkRunner in streaming, `local[2]`, with 10 s windows, and writes
window counts and anomalies as parts (`WriteJsonLineParts`). A watcher notes
when each line first appears on disk.

- window count latency: its appearance minus its window's end;
- alert latency: an `OPENED` anomaly's appearance minus its window's end;
- the peer: Structured Streaming counting the same rate and keys in 10 s
  windows (`withWatermark(0)`, append, `foreachBatch`), as in
  `streaming_latency.py`. It has no disorder bound to wait for and no model.

Windows ending in the first `--warmup` seconds are left out. The lag growth
is the median latency of the run's last third over its first third; the
driver's and workers' memory is sampled by `process_memory`.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from part_watcher import PartWatcher
from process_memory import memory_growth, sample_tree_rss
from streaming_latency import (
    Delivery,
    _read,
    local_session,
    run_peer,
    streaming_options,
    summarize,
)

from pipelines import config as config_loader
from pipelines.outputs import write_parts
from pipelines.zeitgeist import build, zeitgeist_transform
from pipelines.zeitgeist_flags import DEFAULT_CONFIG
from runners.spark import SparkRunner
from testing.live_player import LivePlayer
from testing.zeitgeist_live import live_stream, stream_feed
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.zeitgeist.composite import ANOMALIES, WINDOW_COUNTS

WINDOW_SECONDS = 10


def run_zeitgeist(args, work: Path, memory: list[int]) -> dict[str, list]:
    """Plays the live stream, runs Zeitgeist on it; returns what the watcher
    saw and appends the process tree's RSS every 5 s to `memory`."""
    config = config_loader.read(DEFAULT_CONFIG)
    config["window"]["size_seconds"] = WINDOW_SECONDS
    stream = live_stream(
        rate=args.rate,
        window_ms=WINDOW_SECONDS * 1000,
        minutes=(args.warmup + args.seconds) / 60 + 1,
        num_queries=args.queries,
        seed=args.seed,
        warmup_windows=14,
    )
    inbox, output = work / "inbox", work / "zeitgeist"
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=streaming_options(work / "checkpoint", args.batch_interval),
    )
    follow = FollowSettings(poll_seconds=0.2, max_disorder_seconds=1.0)
    build(
        pipeline,
        [str(inbox / "*.jsonl")],
        None,
        zeitgeist_transform(config),
        output,
        [WINDOW_COUNTS],
        read=lambda pattern, fmt: FollowSearchQueries(pattern, fmt, follow),
        write=write_parts(0.0),
    )
    deliveries: dict[str, list[Delivery]] = {WINDOW_COUNTS: [], ANOMALIES: []}

    def delivered(name: str, record: dict, seen_at: float) -> None:
        if name == ANOMALIES and record.get("status") != "OPENED":
            return
        end_s = record["window_end"] / 1000
        deliveries[name].append(Delivery(end_s, record.get("count", 1), seen_at))

    player = LivePlayer([stream_feed(stream, inbox)]).start()
    with PartWatcher(output, list(deliveries), delivered):
        result = pipeline.run()
        memory.extend(sample_tree_rss(args.warmup + args.seconds))
        result.cancel()
    player.stop()
    print(
        f"zeitgeist: {player.played:,} searches played, "
        f"{len(stream.episodes)} episodes in the stream"
    )
    return deliveries


def _print_row(name: str, row: dict, peer: dict | None) -> None:
    if not row["windows"]:
        print(f"{name:<24} nothing delivered")
        return
    ratio = row["p50"] / peer["p50"] if peer and peer.get("windows") else float("nan")
    print(
        f"{name:<24} {row['windows']:>8,} {row['p50']:>7.2f} {row['p95']:>7.2f} "
        f"{row['lag_growth']:>7.2f} {ratio:>9.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="searches per second")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=240, help="measured time")
    parser.add_argument("--warmup", type=float, default=30, help="excluded start")
    parser.add_argument("--peer_seconds", type=float, default=60)
    parser.add_argument("--batch_interval", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = local_session()
    work = Path(tempfile.mkdtemp(prefix="zeitgeist-latency-"))

    peer_args = argparse.Namespace(
        rate=args.rate, keys=args.queries, seconds=args.peer_seconds, warmup=args.warmup
    )
    t0 = time.time()
    run_peer(spark, peer_args, work / "peer.csv", window_seconds=WINDOW_SECONDS)
    peer = summarize("peer", _read(work / "peer.csv"), peer_args, t0)

    memory: list[int] = []
    t0 = time.time()
    deliveries = run_zeitgeist(args, work, memory)
    counts = summarize("counts", deliveries[WINDOW_COUNTS], args, t0)
    alerts = summarize("alerts", deliveries[ANOMALIES], args, t0)

    print(
        f"rate {args.rate:,} searches/s, {args.queries} queries, "
        f"{WINDOW_SECONDS} s windows, {args.seconds:.0f} s measured after "
        f"{args.warmup:.0f} s (peer {args.peer_seconds:.0f} s), local[2]"
    )
    print(
        f"{'latency after window end':<24} {'windows':>8} {'p50 s':>7} "
        f"{'p95 s':>7} {'lag x':>7} {'p50/peer':>9}"
    )
    _print_row("peer: window count", peer, peer)
    _print_row("zeitgeist: window count", counts, peer)
    _print_row("zeitgeist: alert", alerts, peer)
    if counts.get("windows"):
        print(f"zeitgeist searches counted per window: {counts['rate']:,.0f}")
    if growth := memory_growth(memory):
        print(growth)


if __name__ == "__main__":
    main()

"""Photon live: joined clicks/s and click-to-output latency, against Spark
Structured Streaming's stream-stream join in the same run.

    python benchmarks/photon_throughput.py --streaming             # 200 clicks/s
    python benchmarks/photon_throughput.py --streaming --rate 2000

Live logs (`testing.photon_live`: `--rate` click records a second, clicks
within 5 s of their query, a fifth of the queries logged up to 10 s late,
duplicated and orphan clicks) are played into a query directory and a click
directory, a file every 0.1 s each, event time = now. Photon follows both
(`pipelines.photon.build` with `FollowSettings`: 1 s of disorder, polled
every 0.2 s) on SparkRunner in streaming, local[2], against a Bigtable
emulator, and writes its outputs as parts. A watcher notes when each joined
click first appears on disk.

- click-to-output latency: a joined click's appearance minus the moment it
  became joinable, the later of its click's and its query's arrival;
- joined clicks/s: joined clicks written in the measured time, over it,
  beside the joinable clicks/s offered;
- the peer: Structured Streaming reading the same kind of logs, played the
  same way, as JSON file streams, inner-joined on the query id with
  10-minute watermarks on both sides, results to `foreachBatch`. It has no
  registry, no event store and no exactly-once: duplicated clicks come out
  twice.

Clicks joinable in the first `--warmup` seconds are left out; the lag
growth is the median latency of the run's last third over its first third.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from pathlib import Path

import apache_beam as beam
from part_watcher import PartWatcher
from process_memory import memory_growth, sample_tree_rss
from streaming_latency import Delivery, local_session, streaming_options, summarize

from pipelines.outputs import write_parts
from pipelines.photon import build
from runners.spark import SparkRunner
from testing.bigtable_emulator import BigtableEmulator
from testing.live_player import LivePlayer
from testing.photon_live import feeds, live_logs
from transforms.photon import JOINED, BigtableTarget, JoinParams, PhotonJoin
from transforms.records.follow import FollowSettings

TICK_SECONDS = 0.1


def joinable_at(logs) -> dict[str, float]:
    """Click id -> when (s, wall clock) it became joinable: the later of its
    click's and its query's arrival."""
    query_arrival = dict(
        zip((q.query_id for q in logs.queries), logs.query_arrivals, strict=True)
    )
    ready: dict[str, float] = {}
    for click, arrival in zip(logs.clicks, logs.click_arrivals, strict=True):
        if click.click_id in logs.joinable and click.click_id not in ready:
            ready[click.click_id] = max(arrival, query_arrival[click.query_id]) / 1000
    return ready


def run_photon(args, work: Path, memory: list[int]) -> tuple[list[Delivery], int]:
    """Plays live logs and joins them with Photon on SparkRunner; returns the
    watcher's deliveries and the joined clicks written more than once."""
    minutes = (args.warmup + args.seconds) / 60 + 1
    logs = live_logs(args.rate, minutes, args.seed)
    played = feeds(logs, work / "photon-logs")
    output = work / "photon"
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=streaming_options(work / "checkpoint", args.batch_interval),
    )
    target = BigtableTarget("bench", f"photon-{uuid.uuid4().hex[:8]}")
    transform = PhotonJoin(target, "bench", JoinParams(shards=args.shards))
    patterns = [str(feed.directory / "*.jsonl") for feed in played]
    build(
        pipeline,
        patterns[:1],
        patterns[1:],
        None,
        transform,
        output,
        FollowSettings(poll_seconds=0.2, max_disorder_seconds=1.0),
        write_parts(0.0),
    )
    ready = joinable_at(logs)
    click_ids: list[str] = []
    deliveries: list[Delivery] = []

    def delivered(_name: str, record: dict, seen_at: float) -> None:
        click_ids.append(record["click"]["click_id"])
        deliveries.append(Delivery(ready[click_ids[-1]], 1, seen_at))

    player = LivePlayer(played, tick_seconds=TICK_SECONDS).start()
    with PartWatcher(output, [JOINED], delivered):
        result = pipeline.run()
        memory.extend(sample_tree_rss(args.warmup + args.seconds))
        result.cancel()
    player.stop()
    print(
        f"photon: {len(logs.clicks):,} click records and {len(logs.queries):,} "
        f"queries in the logs, {player.played:,} records played"
    )
    return deliveries, len(click_ids) - len(set(click_ids))


def run_peer(spark, args, work: Path) -> list[Delivery]:
    """Structured Streaming's inner join of the same kind of live logs."""
    from pyspark.sql import functions as F

    logs = live_logs(args.rate, (args.warmup + args.peer_seconds) / 60 + 1, args.seed)
    played = feeds(logs, work / "peer-logs")
    for feed in played:
        feed.directory.mkdir(parents=True)
    ready = joinable_at(logs)
    sink = work / "peer.csv"

    def stream(directory: Path, schema: str, alias: str):
        return (
            spark.readStream.schema(schema)
            .json(str(directory))
            .withColumn("at", (F.col("event_time") / 1000).cast("timestamp"))
            .withWatermark("at", "600 seconds")
            .alias(alias)
        )

    queries = stream(played[0].directory, "query_id STRING, event_time LONG", "q")
    clicks = stream(
        played[1].directory, "click_id STRING, query_id STRING, event_time LONG", "c"
    )
    joined = clicks.join(
        queries,
        F.expr(
            "c.query_id = q.query_id AND "
            "c.at BETWEEN q.at AND q.at + INTERVAL 10 MINUTES"
        ),
    ).select("c.click_id")

    def deliver(batch, _batch_id) -> None:
        ids = [r["click_id"] for r in batch.collect()]
        now = time.time()
        with open(sink, "a") as out:
            out.writelines(f"{click_id},{now}\n" for click_id in ids)

    player = LivePlayer(played, tick_seconds=TICK_SECONDS).start()
    query = joined.writeStream.foreachBatch(deliver).start()
    time.sleep(args.warmup + args.peer_seconds)
    # What was played is joined before the stop, which would otherwise
    # interrupt a running micro-batch.
    player.stop()
    query.processAllAvailable()
    query.stop()
    rows = (line.split(",") for line in sink.read_text().splitlines())
    return [Delivery(ready[c], 1, float(at)) for c, at in rows if c in ready]


def _print_row(name: str, row: dict, seconds: float, peer: dict | None) -> None:
    if not row.get("windows"):
        print(f"{name:<12} nothing delivered")
        return
    ratio = row["p50"] / peer["p50"] if peer and peer.get("windows") else float("nan")
    print(
        f"{name:<12} {row['windows']:>9,} {row['windows'] / seconds:>9,.0f} "
        f"{row['p50']:>7.2f} {row['p95']:>7.2f} {row['lag_growth']:>7.2f} "
        f"{ratio:>9.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200, help="click records/s")
    parser.add_argument("--seconds", type=float, default=180, help="measured time")
    parser.add_argument("--warmup", type=float, default=30, help="excluded start")
    parser.add_argument("--peer_seconds", type=float, default=60)
    parser.add_argument("--batch_interval", type=float, default=0.2)
    parser.add_argument("--shards", type=int, default=JoinParams.shards)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # Started first: Spark's Python workers, forked later, inherit its host.
    emulator = BigtableEmulator()
    emulator.start()
    spark = local_session()
    work = Path(tempfile.mkdtemp(prefix="photon-streaming-"))

    t0 = time.time()
    peer_args = argparse.Namespace(warmup=args.warmup)
    peer = summarize("peer", run_peer(spark, args, work), peer_args, t0)

    memory: list[int] = []
    t0 = time.time()
    try:
        deliveries, repeated = run_photon(args, work, memory)
    finally:
        emulator.stop()
    photon = summarize("photon", deliveries, args, t0)

    print(
        f"rate {args.rate:,.0f} click records/s, {args.seconds:.0f} s measured "
        f"after {args.warmup:.0f} s (peer {args.peer_seconds:.0f} s), local[2]"
    )
    print(
        f"{'click->output':<12} {'joined':>9} {'joined/s':>9} {'p50 s':>7} "
        f"{'p95 s':>7} {'lag x':>7} {'p50/peer':>9}"
    )
    _print_row("peer", peer, args.peer_seconds, peer)
    _print_row("photon", photon, args.seconds, peer)
    print(f"photon joined clicks written more than once: {repeated}")
    if growth := memory_growth(memory):
        print(growth)


if __name__ == "__main__":
    main()

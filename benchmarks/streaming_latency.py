"""Window-to-result latency of SparkRunner streaming, against Spark
Structured Streaming's own windowed count in the same run.

    python benchmarks/streaming_latency.py                    # 2k events/s, 60 s each
    python benchmarks/streaming_latency.py --rate 20000 --seconds 120
    python benchmarks/streaming_latency.py --engines peer,millwheel

An unbounded source emits ``--rate`` events a second with event time = now
(Beam's ``PeriodicImpulse``; Spark's ``rate`` source for the peer), keyed
over ``--keys`` keys, counted per key and 1 s fixed window three ways, one
after the other on the same local[2] SparkSession:

- ``peer``: Structured Streaming, ``withWatermark(0 s)``, append mode,
  results to ``foreachBatch``;
- ``millwheel``: a stateful DoFn with a count per open window in state and
  an event-time timer per window (MillWheel's model), on SparkRunner;
- ``combine``: ``WindowInto(FixedWindows(1)) | CombinePerKey(count)`` on
  SparkRunner.

Latency is the time a (key, window) result reaches the sink minus the
window's end, over the windows that end after ``--warmup`` seconds (start-up
excluded). The sustained rate is the events counted in those windows per
second; lag growth compares the median latency of the run's last third with
its first third (a ratio well above 1 means the job falls behind). Ratios
are to the peer's p50 measured in the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp

from runners.spark import SparkRunner
from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session


@dataclass(frozen=True)
class Delivery:
    """One (key, window) result as the sink saw it."""

    window_end: float
    count: int
    delivered: float


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> list[Delivery]:
    if not path.exists():
        return []
    rows = (line.split(",") for line in path.read_text().splitlines())
    return [Delivery(float(end), int(n), float(at)) for end, n, at in rows]


class RecordDelivery(beam.DoFn):
    """The sink: appends (window end, count, now) per result to a file."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, element):
        _, (window_end, count) = element
        _append(self._path, f"{window_end},{count},{time.time()}\n")


class WindowCounts(beam.DoFn):
    """MillWheel's way: per key, a count per open 1 s window in state and an
    event-time timer at each window's last instant; the window's count goes
    out when the watermark passes its end."""

    COUNTS = ReadModifyWriteStateSpec("counts", PickleCoder())
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)

    def process(
        self,
        element,
        ts=beam.DoFn.TimestampParam,
        counts=beam.DoFn.StateParam(COUNTS),
        window_end=beam.DoFn.TimerParam(WINDOW_END),
    ):
        start = ts.micros // 1_000_000
        open_windows = counts.read() or {}
        if start not in open_windows:
            window_end.set(
                Timestamp(micros=(start + 1) * 1_000_000 - 1),
                dynamic_timer_tag=str(start),
            )
        open_windows[start] = open_windows.get(start, 0) + 1
        counts.write(open_windows)

    @on_timer(WINDOW_END)
    def emit(
        self,
        key=beam.DoFn.KeyParam,
        tag=beam.DoFn.DynamicTimerTagParam,
        counts=beam.DoFn.StateParam(COUNTS),
    ):
        open_windows = counts.read() or {}
        start = int(tag)
        count = open_windows.pop(start, 0)
        counts.write(open_windows)
        yield key, (start + 1, count)


def _with_window_end(kv, window=beam.DoFn.WindowParam):
    key, count = kv
    return key, (window.end.micros / 1e6, count)


def run_beam(kind: str, args, sink: Path, checkpoint: str) -> None:
    """One Beam pipeline on SparkRunner, cancelled after the measured time."""
    start = time.time()
    keys = args.keys
    options = streaming_options(checkpoint, args.batch_interval)
    pipeline = beam.Pipeline(runner=SparkRunner(), options=options)
    keyed = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=start,
            stop_timestamp=start + args.warmup + args.seconds + 5,
            fire_interval=1 / args.rate,
        )
        | "Key" >> beam.Map(lambda t: (str(round(t * args.rate) % keys), 1))
    )
    if kind == "millwheel":
        results = keyed | beam.ParDo(WindowCounts())
    else:
        results = (
            keyed
            | beam.WindowInto(beam.window.FixedWindows(1))
            | beam.CombinePerKey(sum)
            | beam.Map(_with_window_end)
        )
    _ = results | beam.ParDo(RecordDelivery(str(sink)))
    result = pipeline.run()
    result.wait_until_finish(duration=int((args.warmup + args.seconds) * 1000))
    result.cancel()


def run_peer(spark, args, sink: Path, window_seconds: int = 1) -> None:
    """Structured Streaming's windowed count of a rate source, append mode."""
    from pyspark.sql import functions as F

    counts = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", args.rate)
        .load()
        .withColumn("key", F.col("value") % args.keys)
        .withWatermark("timestamp", "0 seconds")
        .groupBy(F.window("timestamp", f"{window_seconds} seconds"), "key")
        .count()
    )

    def deliver(batch, _batch_id) -> None:
        rows = batch.select(F.col("window.end").alias("end"), "count").collect()
        now = time.time()
        lines = "".join(f"{r['end'].timestamp()},{r['count']},{now}\n" for r in rows)
        if lines:
            _append(str(sink), lines)

    query = counts.writeStream.outputMode("append").foreachBatch(deliver).start()
    time.sleep(args.warmup + args.seconds)
    query.stop()


def local_session():
    """The live benchmarks' SparkSession: local[2], two shuffle partitions
    for the peers (one per core), Spark's own logging at ERROR."""
    spark = get_or_create_session(
        SparkOptions(
            [
                "--spark_master_url=local[2]",
                "--spark_conf=spark.sql.shuffle.partitions=2",
            ]
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def streaming_options(checkpoint: str | Path, batch_interval: float) -> PipelineOptions:
    """Options of a streaming job on SparkRunner for the live benchmarks."""
    return PipelineOptions(
        [
            "--streaming",
            f"--checkpoint_dir={checkpoint}",
            f"--streaming_batch_interval_seconds={batch_interval}",
        ]
    )


def summarize(name: str, deliveries: list[Delivery], args, t0: float) -> dict:
    """Latency percentiles and rate over the measured windows."""
    measured = sorted(
        (d for d in deliveries if d.window_end > t0 + args.warmup),
        key=lambda d: d.window_end,
    )
    if not measured:
        return {"engine": name, "windows": 0}
    latency = sorted(d.delivered - d.window_end for d in measured)
    ends = {d.window_end for d in measured}
    third = max(1, len(measured) // 3)
    early = statistics.median(d.delivered - d.window_end for d in measured[:third])
    late = statistics.median(d.delivered - d.window_end for d in measured[-third:])
    return {
        "engine": name,
        "windows": len(measured),
        "p50": statistics.median(latency),
        "p95": latency[int(0.95 * (len(latency) - 1))],
        "p99": latency[int(0.99 * (len(latency) - 1))],
        "rate": sum(d.count for d in measured) / max(len(ends), 1),
        "lag_growth": late / early if early > 0 else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="events per second")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60, help="measured time")
    parser.add_argument("--warmup", type=float, default=15, help="excluded start")
    parser.add_argument("--batch_interval", type=float, default=0.2)
    parser.add_argument("--engines", default="peer,millwheel,combine")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = local_session()
    work = Path(tempfile.mkdtemp(prefix="streaming-latency-"))
    rows = []
    for engine in args.engines.split(","):
        sink = work / f"{engine}.csv"
        t0 = time.time()
        if engine == "peer":
            run_peer(spark, args, sink)
        else:
            run_beam(engine, args, sink, str(work / f"{engine}-checkpoint"))
        rows.append(summarize(engine, _read(sink), args, t0))
    peer = next((r for r in rows if r["engine"] == "peer" and r["windows"]), None)
    print(
        f"rate {args.rate:,} events/s, {args.keys:,} keys, 1 s windows, "
        f"{args.seconds:.0f} s measured after {args.warmup:.0f} s, local[2]"
    )
    header = "engine      windows   p50 s   p95 s   p99 s   events/s  lag x  p50/peer"
    print(header)
    for row in rows:
        if not row["windows"]:
            print(f"{row['engine']:<10}  no window delivered")
            continue
        ratio = row["p50"] / peer["p50"] if peer else float("nan")
        print(
            f"{row['engine']:<10} {row['windows']:>8,} {row['p50']:>7.2f} "
            f"{row['p95']:>7.2f} {row['p99']:>7.2f} {row['rate']:>10,.0f} "
            f"{row['lag_growth']:>6.2f} {ratio:>8.2f}"
        )


if __name__ == "__main__":
    main()

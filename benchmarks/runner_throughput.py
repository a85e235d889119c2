"""Throughput of SparkRunner against DirectRunner and a hand-written PySpark job.

    python benchmarks/runner_throughput.py                    # 1M events, local[2]
    python benchmarks/runner_throughput.py --events 200000 --master local[2]

One workload, three engines, one run: count searches per (query, one-minute
event-time window) over about ``--events`` generated events.

- ``SparkRunner``: a Beam pipeline (generate per shard, FixedWindows(60),
  Count.PerKey, which Beam's combiner lifting turns into a partial count
  before the shuffle) on PySpark ``--master``.
- ``DirectRunner``: the same Beam pipeline.
- ``pyspark-rdd``: the same counts written by hand with ``reduceByKey`` on the
  same SparkSession, the floor for what Spark itself costs.

Events are generated inside each engine from shard numbers, so no engine pays
to ship them. Each engine's counts are checked against the others (OK or
MISMATCH). Printed per engine: wall time, events/s, peak RSS of this process
and all its descendants (the JVM and Spark's Python workers included),
sampled every 50 ms, and the ratio to SparkRunner. The SparkSession stays up
for all three, so its JVM is in every figure: compare differences.
"""

from __future__ import annotations

import argparse
import operator
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

SHARDS = 16
QUERIES = 1000
WINDOW_S = 60
SPAN_S = 6 * 3600


def shard_events(shard: int, per_shard: int) -> Iterator[tuple[str, float]]:
    """(query, event time in seconds) pairs of one shard; deterministic."""
    rng = random.Random(shard)
    for _ in range(per_shard):
        yield f"q{int(rng.paretovariate(1.2)) % QUERIES}", rng.uniform(0, SPAN_S)


def _window_key(event: tuple[str, float]) -> tuple[tuple[str, int], int]:
    query, ts = event
    return (query, int(ts // WINDOW_S) * WINDOW_S), 1


def beam_counts(runner, per_shard: int, out_dir: str, options: list[str]) -> Path:
    """Runs the Beam workload; returns the folder of its text output."""
    prefix = os.path.join(out_dir, "counts")
    with beam.Pipeline(runner=runner, options=PipelineOptions(options)) as p:
        _ = (
            p
            | beam.Create(list(range(SHARDS)))
            | beam.FlatMap(lambda s: shard_events(s, per_shard))
            | beam.Map(lambda e: window.TimestampedValue(e[0], e[1]))
            | beam.WindowInto(window.FixedWindows(WINDOW_S))
            | beam.combiners.Count.PerElement()
            | beam.Map(
                lambda kv, w=beam.DoFn.WindowParam: f"{kv[0]}\t{int(w.start)}\t{kv[1]}"
            )
            | beam.io.WriteToText(prefix)
        )
    return Path(out_dir)


def read_counts(folder: Path) -> dict[tuple[str, int], int]:
    """Counts written by a Beam run."""
    counts = {}
    for path in folder.glob("counts*"):
        for line in path.read_text().splitlines():
            query, start, n = line.split("\t")
            counts[query, int(start)] = int(n)
    return counts


def rdd_counts(sc, per_shard: int) -> dict[tuple[str, int], int]:
    """The same counts with plain PySpark RDDs."""
    return dict(
        sc.parallelize(range(SHARDS), SHARDS)
        .flatMap(lambda s: shard_events(s, per_shard))
        .map(_window_key)
        .reduceByKey(operator.add)
        .collect()
    )


class PeakRss:
    """Samples the RSS of this process and its descendants; keeps the peak."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _tree_rss(os.getpid()))


def _tree_rss(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def measure(name: str, events: int, run: Callable[[], dict]) -> tuple[dict, dict]:
    """Runs one engine; returns its counts and its figures."""
    with PeakRss() as rss:
        start = time.perf_counter()
        counts = run()
        seconds = time.perf_counter() - start
    figures = {
        "engine": name,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "peak_rss_mb": rss.peak / 2**20,
    }
    print(
        f"{name:>12}: {seconds:7.1f} s  {events / seconds:10,.0f} events/s  "
        f"peak RSS {rss.peak / 2**20:7.0f} MiB",
        flush=True,
    )
    return counts, figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip_direct", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from runners.spark import SparkRunner
    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

    per_shard = args.events // SHARDS
    events = per_shard * SHARDS
    spark_args = [f"--spark_master_url={args.master}"]
    session = get_or_create_session(SparkOptions(spark_args))
    sc = session.sparkContext
    print(f"{events:,} events, {SHARDS} shards, master {args.master}", flush=True)

    # Warm-up: Spark's first job pays JVM and Python worker start-up.
    rdd_counts(sc, 100)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(
            measure(
                "SparkRunner",
                events,
                lambda: read_counts(
                    beam_counts(SparkRunner(), per_shard, f"{tmp}/spark", spark_args)
                ),
            )
        )
        results.append(
            measure("pyspark-rdd", events, lambda: rdd_counts(sc, per_shard))
        )
        if not args.skip_direct:
            results.append(
                measure(
                    "DirectRunner",
                    events,
                    lambda: read_counts(
                        beam_counts("DirectRunner", per_shard, f"{tmp}/direct", [])
                    ),
                )
            )
    reference = results[0][0]
    spark_rate = results[0][1]["events_per_s"]
    print()
    header = ("engine", "events/s", "vs SparkRunner", "peak MiB")
    print("{:>12}  {:>10}  {:>14}  {:>8}  counts".format(*header))
    for counts, fig in results:
        check = "OK" if counts == reference else "MISMATCH"
        ratio = fig["events_per_s"] / spark_rate
        print(
            f"{fig['engine']:>12}  {fig['events_per_s']:10,.0f}  {ratio:13.2f}x  "
            f"{fig['peak_rss_mb']:8.0f}  {check} ({sum(counts.values()):,} events)"
        )
    session.stop()


if __name__ == "__main__":
    main()

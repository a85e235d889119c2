"""Throughput of SparkRunner against DirectRunner and a hand-written PySpark job.

    python benchmarks/runner_throughput.py                    # Zeitgeist, 1M events
    python benchmarks/runner_throughput.py --events 200000 \\
        --events_list 200000,800000                           # + driver memory scaling
    python benchmarks/runner_throughput.py --workload counts  # synthetic counts

Two workloads, three engines, one run, all on ``--master`` (``local[2]``).

``--workload zeitgeist`` (default): about ``--events`` single searches from
``testing.zeitgeist_generator`` (one record per search) are written to a
Parquet file once, then

- ``SparkRunner``: the whole Zeitgeist job (``pipelines.zeitgeist.build``,
  which takes the columnar path for Parquet: ``ReadSearchBatches``,
  ``Zeitgeist.on_batches()``, JSON Lines sinks, with the window_counts
  output the CLI's ``--write_window_counts`` adds);
- ``DirectRunner``: the same job on Beam's DirectRunner, as the command
  runs it with no ``--runner``: in process, without Beam's first attempt
  to download Prism (``runners.in_process``), which where GitHub does not
  answer added to each run (figures before 2026-11-28; the same within
  the noise, 554,629 against 549,919 searches/s at 1.03M);
- ``pyspark-rdd``: only the (query, 5-minute window) counts, by hand, from
  the same Parquet file with ``spark.read.parquet`` and ``reduceByKey``: the
  floor for the job's window-count stage on Spark;
- ``pyspark-dataframe``: the same counts as a DataFrame ``groupBy``, which
  never calls Python per row: the floor of Spark itself.

The non-empty windows of both Beam runs' window_counts must equal the RDD
job's counts (OK or MISMATCH; zero-count windows are the pipeline's own).
Before the timed runs each engine runs once, untimed, on
``--warmup_events`` (50,000) other searches: the figures are then
steady-state, without the JVM's JIT compilation and the first-use costs of
Spark's Python workers. ``--warmup_events 0`` measures cold runs.

``--events_list N1,N2,...`` then runs SparkRunner on each size, each in a
fresh interpreter, and prints the peak RSS of the driver process alone (not
the JVM nor Spark's Python workers) at each size and its ratio to the
smallest: flat when nothing is collected on the driver.

``--workload counts``: count searches per (query, one-minute event-time
window) over events generated inside each engine from shard numbers, so no
engine pays to ship them (``FixedWindows(60)`` and ``Count.PerElement``, which
Beam's combiner lifting turns into a partial count before the shuffle, and
the same with ``reduceByKey``).

Each Beam run is timed from ``run()`` to ``wait_until_finish()``, as in
``zeitgeist_throughput.py``: building the pipeline object and reading its
output files back for the check are the benchmark's work, not the runner's,
and cost both runners the same seconds. The RDD job is timed whole.

Each engine is timed ``--repeats`` times (3), in rounds of every engine in
turn, and the table and ratios use each engine's median run: a single run
on a shared machine can be off by a fifth.

Printed per run: that time, events/s, the wall time with construction
and read-back, peak RSS of this process and all its descendants (the JVM and
Spark's Python workers included), sampled every 200 ms, CPU seconds of the
driver, the JVM and Spark's Python workers over that wall time, and the
ratios. The SparkSession stays up for all three, so its JVM is
in every figure: compare differences.
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window
from process_memory import PeakRss, process_tree

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


def beam_counts(
    runner, per_shard: int, out_dir: str, options: list[str]
) -> tuple[dict[tuple[str, int], int], float]:
    """Runs the Beam workload; returns its counts and its run's seconds."""
    prefix = os.path.join(out_dir, "counts")
    p = beam.Pipeline(runner=runner, options=PipelineOptions(options))
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
    started = time.perf_counter()
    p.run().wait_until_finish()
    seconds = time.perf_counter() - started
    return read_counts(Path(out_dir)), seconds


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


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    """(role, CPU seconds so far) of this driver, the JVM and Python workers."""
    me = os.getpid()
    return {
        pid: ("driver" if pid == me else "JVM" if name == "java" else "workers", cpu)
        for pid, (name, _, cpu) in process_tree(me).items()
    }


def _cpu_since(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per role since ``before``, of the processes alive now (a
    worker that exited in between takes its CPU with it)."""
    used = {"driver": 0.0, "JVM": 0.0, "workers": 0.0}
    for pid, (role, cpu) in _cpu_by_process().items():
        used[role] += cpu - before.get(pid, (role, 0.0))[1]
    return used


def timed(run: Callable[[], object]) -> tuple[object, float]:
    """``run()``'s result and its seconds: for an engine timed whole."""
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def measure(
    name: str, events: int, run: Callable[[], tuple[object, float]]
) -> tuple[object, dict]:
    """Runs one engine, which returns its counts and its timed seconds;
    returns the counts and the figures."""
    cpu_before = _cpu_by_process()
    with PeakRss() as rss:
        start = time.perf_counter()
        counts, seconds = run()
        wall = time.perf_counter() - start
    cpu = _cpu_since(cpu_before)
    figures = {
        "engine": name,
        "events": events,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "peak_rss_mb": rss.peak / 2**20,
    }
    print(
        f"{name:>12}: {seconds:7.1f} s  {events / seconds:10,.0f} events/s  "
        f"(wall {wall:.1f} s)  peak RSS {rss.peak / 2**20:7.0f} MiB  CPU s: "
        + ", ".join(f"{role} {t:.1f}" for role, t in cpu.items()),
        flush=True,
    )
    return counts, figures


def print_table(results: list[tuple[object, dict]], total: Callable) -> None:
    """Events/s, ratio to SparkRunner, peak RSS and count check per engine.

    Counts are checked against the hand-written RDD job's: the engine under
    test must not be its own reference."""
    by_engine = {fig["engine"]: counts for counts, fig in results}
    reference = by_engine.get("pyspark-rdd", results[0][0])
    spark_rate = results[0][1]["events_per_s"]
    print()
    header = ("engine", "events/s", "vs SparkRunner", "peak MiB")
    print("{:>17}  {:>10}  {:>14}  {:>8}  counts".format(*header))
    for counts, fig in results:
        ratio = fig["events_per_s"] / spark_rate
        if counts is None:
            check = "MISMATCH (the runs disagree)"
        else:
            check = "OK" if counts == reference else "MISMATCH"
            check += f" ({total(counts):,} events)"
        print(
            f"{fig['engine']:>17}  {fig['events_per_s']:10,.0f}  {ratio:13.2f}x  "
            f"{fig['peak_rss_mb']:8.0f}  {check}"
        )


def print_ratios(results: list[tuple[object, dict]]) -> None:
    """The throughput ratios of the engines that ran, against SparkRunner."""
    rate = {fig["engine"]: fig["events_per_s"] for _, fig in results}
    spark = rate["SparkRunner"]
    if "DirectRunner" in rate:
        print(f"SparkRunner / DirectRunner: {spark / rate['DirectRunner']:.2f}x")
    print(f"pyspark-rdd / SparkRunner:  {rate['pyspark-rdd'] / spark:.2f}x")
    if "pyspark-dataframe" in rate:
        dataframe = rate["pyspark-dataframe"]
        print(f"pyspark-dataframe / SparkRunner: {dataframe / spark:.2f}x")


def run_counts(args: argparse.Namespace, sc, spark_args: list[str]) -> None:
    """The synthetic window-count workload on the three engines."""
    from runners.in_process import InProcessDirectRunner
    from runners.spark import SparkRunner

    per_shard = args.events // SHARDS
    events = per_shard * SHARDS
    print(f"counts: {events:,} events, {SHARDS} shards, master {args.master}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(
            measure(
                "SparkRunner",
                events,
                lambda: beam_counts(
                    SparkRunner(), per_shard, f"{tmp}/spark", spark_args
                ),
            )
        )
        results.append(
            measure(
                "pyspark-rdd", events, lambda: timed(lambda: rdd_counts(sc, per_shard))
            )
        )
        if not args.skip_direct:
            results.append(
                measure(
                    "DirectRunner",
                    events,
                    lambda: beam_counts(
                        InProcessDirectRunner(), per_shard, f"{tmp}/direct", []
                    ),
                )
            )
    print_table(results, lambda counts: sum(counts.values()))
    print_ratios(results)


# --- Zeitgeist workload ---------------------------------------------------

ZEITGEIST_WINDOW_S = 300
# First argument of the subprocess that runs one SparkRunner pipeline.
_CHILD = "--_spark_child"


def write_searches(events: int, seed: int, path: Path) -> int:
    """Writes about `events` single searches to Parquet; returns how many."""
    from zeitgeist_throughput import generate_stream

    stream = generate_stream(events, 100, ZEITGEIST_WINDOW_S * 1000, seed)
    stream.write_parquet(path)
    return int(stream.count.sum())


def zeitgeist_beam(
    source: Path, output: Path, beam_args: list[str]
) -> tuple[list[tuple], float]:
    """Runs the Zeitgeist job; returns its non-empty window counts, sorted,
    and its seconds from ``run()`` to ``wait_until_finish()``."""
    from zeitgeist_throughput import run_pipeline

    seconds = run_pipeline(
        str(source), output, [f"--window_seconds={ZEITGEIST_WINDOW_S}", *beam_args]
    )
    return beam_window_counts(output), seconds


def beam_window_counts(output: Path) -> list[tuple[str, int, int]]:
    """(query, window start ms, count) of non-empty windows a Beam run wrote."""
    from pipelines.outputs import read_output
    from transforms.records.zeitgeist_pb2 import WindowCount
    from transforms.zeitgeist.composite import WINDOW_COUNTS

    return sorted(
        (w.query, w.window_start, w.count)
        for w in read_output(output, WINDOW_COUNTS, WindowCount)
        if w.count
    )


def zeitgeist_rdd(session, source: Path) -> list[tuple[str, int, int]]:
    """The same window counts by hand: Parquet rows, reduceByKey."""
    window_ms = ZEITGEIST_WINDOW_S * 1000
    rows = session.read.parquet(str(source)).select("query", "event_time", "count")
    counts = (
        rows.rdd.map(lambda r: ((r[0], r[1] - r[1] % window_ms), r[2]))
        .reduceByKey(operator.add)
        .collect()
    )
    return sorted((query, start, n) for (query, start), n in counts)


def zeitgeist_dataframe(session, source: Path) -> list[tuple[str, int, int]]:
    """The same window counts as a DataFrame job: Spark's own columnar
    Parquet reader and aggregation, with no Python per row."""
    from pyspark.sql import functions as F

    window_ms = ZEITGEIST_WINDOW_S * 1000
    rows = session.read.parquet(str(source))
    start = F.col("event_time") - F.pmod(F.col("event_time"), F.lit(window_ms))
    counts = (
        rows.groupBy(F.col("query"), start.alias("start"))
        .agg(F.sum("count").alias("n"))
        .collect()
    )
    return sorted((r["query"], r["start"], r["n"]) for r in counts)


def run_zeitgeist(args: argparse.Namespace, session, spark_args: list[str]) -> None:
    """The Zeitgeist job on the three engines, on one Parquet file."""
    with tempfile.TemporaryDirectory(prefix="runner_throughput_") as tmp:
        spark_beam = ["--runner=SparkRunner", *spark_args]
        engines: dict[str, Callable[[Path, str], object]] = {
            "SparkRunner": lambda src, out: zeitgeist_beam(src, Path(out), spark_beam),
            "pyspark-rdd": lambda src, out: timed(lambda: zeitgeist_rdd(session, src)),
            "pyspark-dataframe": lambda src, out: timed(
                lambda: zeitgeist_dataframe(session, src)
            ),
        }
        if not args.skip_direct:
            engines["DirectRunner"] = lambda src, out: zeitgeist_beam(
                src, Path(out), []
            )
        if args.warmup_events:
            warmup = Path(tmp) / "warmup.parquet"
            write_searches(args.warmup_events, args.seed + 1, warmup)
            print(f"warm-up: each engine once on {args.warmup_events:,} events")
            for name, run in engines.items():
                run(warmup, f"{tmp}/warmup-{name}")
        source = Path(tmp) / "searches.parquet"
        events = write_searches(args.events, args.seed, source)
        print(
            f"zeitgeist: {events:,} events, master {args.master}, "
            f"{args.repeats} timed run(s) per engine, in rounds",
            flush=True,
        )
        # Rounds of every engine in turn, so that a slow spell of the shared
        # machine falls on all of them; each engine's median run is kept.
        runs: dict[str, list[tuple[object, dict]]] = {name: [] for name in engines}
        for round_ in range(args.repeats):
            for name, run in engines.items():
                output = f"{tmp}/{name}-{round_}"
                runs[name].append(
                    measure(name, events, functools.partial(run, source, output))
                )
        results = [median_run(engine_runs) for engine_runs in runs.values()]
    print_table(results, lambda counts: sum(n for *_, n in counts))
    print_ratios(results)


def median_run(runs: list[tuple[object, dict]]) -> tuple[object, dict]:
    """One engine's runs as one: the median seconds (and events/s), the
    highest peak RSS, and the counts if every run gave the same, else None
    (a mismatch)."""
    counts = runs[0][0] if all(c == runs[0][0] for c, _ in runs) else None
    seconds = statistics.median(fig["seconds"] for _, fig in runs)
    figures = dict(runs[0][1])
    figures["seconds"] = seconds
    figures["events_per_s"] = figures["events"] / seconds
    figures["peak_rss_mb"] = max(fig["peak_rss_mb"] for _, fig in runs)
    return counts, figures


def spark_child(source: str, output: str, master: str) -> None:
    """In a fresh interpreter: one SparkRunner run; prints its figures as JSON.

    "driver" is this process's own peak RSS, without the JVM and Spark's
    Python workers, which are other processes.
    """
    from zeitgeist_throughput import own_peak_rss, run_pipeline

    beam_args = [
        "--runner=SparkRunner",
        f"--spark_master_url={master}",
        f"--window_seconds={ZEITGEIST_WINDOW_S}",
    ]
    with PeakRss() as rss:
        seconds = run_pipeline(source, Path(output), beam_args)
    print(json.dumps({"seconds": seconds, "driver": own_peak_rss(), "tree": rss.peak}))


def scale_point(events: int, seed: int, master: str) -> dict:
    """SparkRunner on about `events` searches in a subprocess; its figures."""
    with tempfile.TemporaryDirectory(prefix="runner_scale_") as tmp:
        source = Path(tmp) / "searches.parquet"
        events = write_searches(events, seed, source)
        done = subprocess.run(
            [sys.executable, __file__, _CHILD, str(source), f"{tmp}/out", master],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        sys.exit(f"SparkRunner run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"events": events, **json.loads(done.stdout.splitlines()[-1])}


def run_scale(sizes: list[int], seed: int, master: str) -> None:
    """Driver peak RSS of SparkRunner at each input size, and the ratios."""
    print(f"\nSparkRunner driver memory vs input size (master {master}):")
    header = ("events", "events/s*", "driver MiB", "vs first", "tree MiB")
    print("{:>10}  {:>10}  {:>10}  {:>8}  {:>8}".format(*header))
    points = []
    for size in sizes:
        points.append(scale_point(size, seed, master))
        point, first = points[-1], points[0]
        print(
            f"{point['events']:10,}  {point['events'] / point['seconds']:10,.0f}  "
            f"{point['driver'] / 2**20:10.0f}  "
            f"{point['driver'] / first['driver']:7.2f}x  "
            f"{point['tree'] / 2**20:8.0f}",
            flush=True,
        )
    first, last = points[0], points[-1]
    print(
        f"driver peak RSS x{last['driver'] / first['driver']:.2f} for "
        f"x{last['events'] / first['events']:.2f} the input  (* includes the "
        "fresh interpreter's Spark start-up)"
    )


def _sizes(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload", choices=("zeitgeist", "counts"), default="zeitgeist"
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip_direct", action="store_true")
    parser.add_argument("--seed", type=int, default=7, help="Zeitgeist generator seed")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="Zeitgeist: timed runs per engine; the median is reported",
    )
    parser.add_argument(
        "--warmup_events",
        type=int,
        default=50_000,
        help="Zeitgeist: run each engine once on this many events first, "
        "untimed, so that figures are steady-state (0: measure cold runs)",
    )
    parser.add_argument(
        "--events_list",
        type=_sizes,
        default=[],
        help="Zeitgeist sizes for the SparkRunner driver-memory scaling study",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Runs the benchmark (or, in the subprocess, one SparkRunner pipeline)."""
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if argv[:1] == [_CHILD]:
        spark_child(*argv[1:])
        return
    args = parse_args(argv)

    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

    spark_args = [f"--spark_master_url={args.master}"]
    session = get_or_create_session(SparkOptions(spark_args))
    # Warm-up: Spark's first job pays JVM and Python worker start-up.
    rdd_counts(session.sparkContext, 100)
    if args.workload == "counts":
        run_counts(args, session.sparkContext, spark_args)
    else:
        run_zeitgeist(args, session, spark_args)
    session.stop()
    if args.events_list:
        run_scale(args.events_list, args.seed, args.master)


if __name__ == "__main__":
    main()

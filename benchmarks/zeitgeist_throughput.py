"""Throughput of the whole Zeitgeist pipeline against a numpy count floor.

    python benchmarks/zeitgeist_throughput.py                 # 1M events, 3 runs
    python benchmarks/zeitgeist_throughput.py --events 200000 --repeats 1
    python benchmarks/zeitgeist_throughput.py --direct_num_workers 2 \\
        --direct_running_mode multi_processing
    python benchmarks/zeitgeist_throughput.py --runner SparkRunner ...

A generated stream of about `--events` single searches (one record per
search, in event-time order, no late or duplicate records) is written to a
Parquet file and run through the job `python -m pipelines.zeitgeist --input
FILE --output DIR --write_window_counts` builds: read, parse, event time,
`Zeitgeist`, JSON Lines sinks. Unknown flags go to Beam, as with the CLI.

Each run is a fresh subprocess, so that its peak RSS is the pipeline's alone
(the parent holds the generated arrays): the subprocess reports its own
high-water mark (VmHWM), not the workers a multi-process runner starts. Each
run is timed from `run()` to `wait_until_finish()`: interpreter start-up,
pipeline construction and, with `--runner SparkRunner`, the Spark session's
start (done, with a first small job, before the clock) are fixed costs, not
throughput.

The baseline, measured in the same run on the same generated arrays, is the
floor for this job: counting searches per (query, window) with
`np.bincount`. The pipeline's window counts must equal it (OK/MISMATCH).

The read-and-validate stage alone is also timed, in this process and without
Beam, on every row group of the same file (median of `--repeats`): the
columnar reader the job uses for Parquet (`ReadSearchBatches`' DoFn), the
per-row reader (`ReadSearchQueries`' DoFn), and a plain
`pyarrow.parquet.read_table` of the file, in rows/s. The same rows written
as CSV (`pyarrow.csv.write_csv`) and as JSON Lines are read likewise: the
columnar reader, the per-line reader, and Arrow's own CSV or JSON reader
(which validates nothing) as the baseline. So is a JSON Lines copy as
exported logs often are (`jsonl-esc`): queries with a non-ASCII word,
which `json.dumps` writes as "\\u" escapes, and a key a search does not
have; and a CSV and a JSON Lines copy with ISO-8601 event times (`csv-iso`,
`jsonl-iso`).
"""

import argparse
import dataclasses
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import zeitgeist
from pipelines.outputs import read_output
from pipelines.runner_choice import choose_runner
from testing.zeitgeist_generator import DAY_MS, GeneratedStream, StreamSpec, generate
from transforms.records.file_reader import FileReader
from transforms.records.parquet_parts import ParquetPart, ReadParquetPart
from transforms.records.parse import parse_search_query
from transforms.records.readers import DEFAULT_MAX_LINE_BYTES, read_file
from transforms.records.search_batches import ReadSearchBatchPart
from transforms.records.text_batches import read_text_searches
from transforms.records.zeitgeist_pb2 import WindowCount
from transforms.zeitgeist.composite import WINDOW_COUNTS

# First argument of the subprocess that runs one pipeline.
_CHILD = "--_run_pipeline"


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The benchmark's flags, and the rest for Beam."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--events", type=int, default=1_000_000, help="about this many searches"
    )
    parser.add_argument("--repeats", type=int, default=3, help="pipeline runs")
    parser.add_argument("--num_queries", type=int, default=100)
    parser.add_argument(
        "--window_seconds", type=int, default=300, help="the job's window size"
    )
    parser.add_argument("--seed", type=int, default=7, help="generator seed")
    return parser.parse_known_args(argv)


def generate_stream(
    events: int, num_queries: int, window_ms: int, seed: int
) -> GeneratedStream:
    """About `events` searches, one record each, from the default traffic.

    The duration is sized on the mean baseline traffic of one generated
    day: a whole day, because every query's seasonal profile averages out
    over it. Episodes and Poisson noise make the final count approximate.
    """
    probe = StreamSpec(
        num_queries=num_queries,
        duration_ms=DAY_MS - DAY_MS % window_ms,
        window_ms=window_ms,
    )
    per_window = generate(probe, seed).baseline_counts.sum() / probe.num_windows
    windows = max(1, round(events / per_window))
    return generate(dataclasses.replace(probe, duration_ms=windows * window_ms), seed)


def numpy_counts(stream: GeneratedStream) -> np.ndarray:
    """Searches per (query, window), shape (num_queries, num_windows)."""
    spec = stream.spec
    window = (stream.event_time_ms - spec.start_ms) // spec.window_ms
    cell = stream.query_index.astype(np.int64) * spec.num_windows + window
    cells = spec.num_queries * spec.num_windows
    counts = np.bincount(cell, weights=stream.count, minlength=cells)
    return counts.astype(np.int64).reshape(spec.num_queries, spec.num_windows)


def time_numpy(stream: GeneratedStream, repeats: int) -> tuple[list[float], np.ndarray]:
    """Seconds of each of `repeats` numpy counts, and the counts."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        counts = numpy_counts(stream)
        seconds.append(time.perf_counter() - started)
    return seconds, counts


def run_pipeline(source: str, output: pathlib.Path, argv: Sequence[str]) -> float:
    """Run the CLI's job on `source` in this process; return its seconds.

    `argv` holds `--window_seconds` and Beam's flags, parsed as the CLI does.
    """
    cli = ["--input", source, "--output", str(output), "--write_window_counts"]
    args, beam_args = zeitgeist.parse_args([*cli, *argv])
    transform = zeitgeist.zeitgeist_transform(zeitgeist.load_config(args))
    runner, beam_args = choose_runner(beam_args)
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    zeitgeist.build(pipeline, args.input, None, transform, output, [WINDOW_COUNTS])
    started = time.perf_counter()
    pipeline.run().wait_until_finish()
    return time.perf_counter() - started


def warm_spark(argv: Sequence[str]) -> None:
    """Starts the Spark session the run will reuse, and runs a first small
    job on it: the JVM's and the Python workers' start is a fixed cost of a
    fresh interpreter, like its own, not the pipeline's throughput."""
    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

    session = get_or_create_session(SparkOptions(list(argv)))
    session.sparkContext.parallelize(range(100), 2).count()


def time_read_stage(source: pathlib.Path, repeats: int) -> dict[str, float]:
    """Median seconds of each way to read `source`'s rows (see the module doc)."""
    metadata = pq.ParquetFile(source).metadata
    parts, first_row = [], 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        parts.append(ParquetPart(str(source), group, first_row, rows))
        first_row += rows
    return _medians(
        {
            "read_table": lambda: pq.read_table(source),
            "columnar": lambda: _drain(ReadSearchBatchPart(), parts),
            "per_row": lambda: _drain(
                ReadParquetPart(parse_search_query, "SearchQuery"), parts
            ),
        },
        repeats,
    )


def time_text_read_stage(
    source: pathlib.Path, fmt: str, repeats: int
) -> dict[str, float]:
    """Median seconds of each way to read the CSV or JSON Lines file
    `source`: Arrow's own reader (no validation), the columnar reader and
    the per-line reader."""
    arrow_read = pa_csv.read_csv if fmt == "csv" else pa_json.read_json
    return _medians(
        {
            "arrow_read": lambda: arrow_read(source),
            "columnar": lambda: _drain_file(source, fmt, read_text_searches),
            "per_line": lambda: _drain_file(source, fmt, FileReader.read),
        },
        repeats,
    )


def _medians(readers: dict, repeats: int) -> dict[str, float]:
    medians = {}
    for name, read in readers.items():
        read()  # warm: page cache, imports, first-call costs
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            read()
            seconds.append(time.perf_counter() - started)
        medians[name] = statistics.median(seconds)
    return medians


def _drain(fn: beam.DoFn, parts: list[ParquetPart]) -> None:
    for part in parts:
        for _ in fn.process(part):
            pass


def _drain_file(source: pathlib.Path, fmt: str, read) -> None:
    outputs = read_file(
        str(source),
        parse_search_query,
        "SearchQuery",
        fmt,
        DEFAULT_MAX_LINE_BYTES,
        read,
    )
    for _ in outputs:
        pass


def write_text_copies(source: pathlib.Path) -> dict[str, tuple[str, pathlib.Path]]:
    """The Parquet file's rows as CSV and as JSON Lines, beside it, by label:
    each copy's format and path. `jsonl-esc` is JSON Lines as exported logs
    often are: non-ASCII queries, which `json.dumps` writes as "\\u" escapes
    by default, and a key that is not a search's. `csv-iso` and `jsonl-iso`
    have ISO-8601 event times (`2026-01-05T00:00:00.065+0000`, in JSON a
    string), which the columnar reader converts in Arrow."""
    table = pq.read_table(source)
    copies = {
        "csv": ("csv", source.with_suffix(".csv")),
        "csv-iso": ("csv", source.with_name(source.stem + "-iso.csv")),
        "jsonl": ("jsonl", source.with_suffix(".jsonl")),
        "jsonl-esc": ("jsonl", source.with_name(source.stem + "-esc.jsonl")),
        "jsonl-iso": ("jsonl", source.with_name(source.stem + "-iso.jsonl")),
    }
    pa_csv.write_csv(table, copies["csv"][1])
    instants = pc.cast(table.column("event_time"), pa.timestamp("ms", tz="UTC"))
    iso_times = pc.strftime(instants, format="%Y-%m-%dT%H:%M:%S%z")
    iso_table = table.set_column(
        table.schema.get_field_index("event_time"), "event_time", iso_times
    )
    pa_csv.write_csv(iso_table, copies["csv-iso"][1])
    rows = table.to_pylist()
    with open(copies["jsonl"][1], "w", encoding="utf-8") as lines:
        for row in rows:
            lines.write(json.dumps(row) + "\n")
    with open(copies["jsonl-esc"][1], "w", encoding="utf-8") as lines:
        for row in rows:
            exported = {**row, "query": f"{row['query']} café", "client": "web"}
            lines.write(json.dumps(exported) + "\n")
    with open(copies["jsonl-iso"][1], "w", encoding="utf-8") as lines:
        for row in iso_table.to_pylist():
            lines.write(json.dumps(row) + "\n")
    return copies


def read_report(rows: int, medians: dict[str, float], label: str = "") -> str:
    rates = {name: rows / seconds for name, seconds in medians.items()}
    base_name = next(iter(rates))
    base = rates[base_name]
    return "\n".join(
        f"read {label:<10}{name:<11}{rate:>12,.0f} rows/s  "
        f"{rate / base:.2f}x {base_name}"
        for name, rate in rates.items()
    )


def own_peak_rss() -> int:
    """Peak RSS in bytes of this process alone (VmHWM in /proc/self/status).

    Not the parent's `ru_maxrss` of its children: Linux counts the forked
    copy of the parent's memory into a child's maximum, so every run would
    report at least the parent's size at the fork, generated arrays included.
    """
    status = pathlib.Path("/proc/self/status").read_text()
    kib = re.search(r"^VmHWM:\s*(\d+) kB$", status, re.MULTILINE)
    if kib is None:
        raise RuntimeError("no VmHWM in /proc/self/status")
    return int(kib.group(1)) * 1024


def time_pipeline(
    source: pathlib.Path, output: pathlib.Path, argv: list[str]
) -> tuple[float, int]:
    """One run in a fresh interpreter, output to `output`: seconds, peak RSS."""
    done = subprocess.run(
        [sys.executable, __file__, _CHILD, str(source), str(output), *argv],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"pipeline run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.splitlines()[-1])
    return figures["seconds"], figures["peak_rss"]


def check_counts(
    output: pathlib.Path, stream: GeneratedStream, counts: np.ndarray
) -> tuple[bool, int]:
    """Whether one run's non-empty window counts are numpy's; how many.

    Sorted lists rather than dicts, so that a window emitted twice is a
    mismatch too. Zero-count windows are the pipeline's own (dips need them).
    """
    emitted = sorted(
        (w.query, w.window_start, w.count)
        for w in read_output(output, WINDOW_COUNTS, WindowCount)
        if w.count
    )
    query, window = np.nonzero(counts)
    expected = sorted(
        zip(
            [stream.query_names[q] for q in query.tolist()],
            stream.window_starts[window].tolist(),
            counts[query, window].tolist(),
            strict=True,
        )
    )
    return emitted == expected, len(expected)


def report(
    stream: GeneratedStream,
    pipeline_s: list[float],
    peak_rss: list[int],
    numpy_s: list[float],
    check: tuple[bool, int],
    argv: list[str],
) -> str:
    """The printed result: rates by median time, ratio, RSS and the check."""
    events = int(stream.count.sum())
    pipeline_rate = events / statistics.median(pipeline_s)
    numpy_rate = events / statistics.median(numpy_s)
    rss_mib = max(peak_rss) / (1 << 20)
    ok, windows = check
    runs = ", ".join(f"{s:.1f}" for s in pipeline_s)
    spec = stream.spec
    return "\n".join(
        [
            f"Zeitgeist throughput: {events:,} events, {spec.num_queries} queries x "
            f"{spec.num_windows} windows of {spec.window_ms // 1000} s, "
            f"{len(pipeline_s)} repeat(s), Beam args: {' '.join(argv) or '(none)'}",
            f"pipeline  {pipeline_rate:>14,.0f} events/s  median of runs {runs} s",
            f"numpy     {numpy_rate:>14,.0f} events/s  "
            f"median {statistics.median(numpy_s) * 1000:.1f} ms",
            f"ratio     {pipeline_rate / numpy_rate:.2e}  (pipeline / numpy)",
            f"peak RSS  {rss_mib:,.0f} MiB  (pipeline process alone, largest run)",
            f"counts    {'OK' if ok else 'MISMATCH'}  ({windows:,} non-empty windows)",
        ]
    )


def main(argv: Sequence[str]) -> int:
    """Run the benchmark (or, in the subprocess, one pipeline); exit status."""
    if argv[:1] == [_CHILD]:
        source, output, *rest = argv[1:]
        if "SparkRunner" in {flag.rpartition("=")[2] for flag in rest}:
            warm_spark(rest)
        seconds = run_pipeline(source, pathlib.Path(output), rest)
        print(json.dumps({"seconds": seconds, "peak_rss": own_peak_rss()}))
        return 0
    args, beam_args = parse_args(argv)
    child_argv = [f"--window_seconds={args.window_seconds}", *beam_args]
    stream = generate_stream(
        args.events, args.num_queries, args.window_seconds * 1000, args.seed
    )
    numpy_s, counts = time_numpy(stream, args.repeats)
    with tempfile.TemporaryDirectory(prefix="zeitgeist_throughput_") as tmp:
        source = pathlib.Path(tmp) / "searches.parquet"
        stream.write_parquet(source)
        read_s = time_read_stage(source, args.repeats)
        text_read_s = {
            label: time_text_read_stage(path, fmt, args.repeats)
            for label, (fmt, path) in write_text_copies(source).items()
        }
        outputs = [pathlib.Path(tmp) / f"run{i}" for i in range(args.repeats)]
        runs = [time_pipeline(source, out, child_argv) for out in outputs]
        checks = [check_counts(out, stream, counts) for out in outputs]
    check = (all(ok for ok, _ in checks), checks[0][1])
    pipeline_s = [seconds for seconds, _ in runs]
    peak_rss = [peak for _, peak in runs]
    print(report(stream, pipeline_s, peak_rss, numpy_s, check, beam_args))
    print(read_report(len(stream), read_s, "parquet"))
    for label, medians in text_read_s.items():
        print(read_report(len(stream), medians, label))
    return 0 if check[0] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

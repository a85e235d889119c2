"""Photon pipeline joined clicks/s on the DirectRunner and the SparkRunner.

    python benchmarks/photon_throughput.py [--clicks 1000000]
        [--runners DirectRunner,SparkRunner] [--clicks_per_minute 1000]
        [--runs 1] [--seed 1] [--shards 64]

Generates query and click logs of about `--clicks` clicks (late queries,
clicks before their query, duplicated and orphan clicks:
`testing.photon_generator`) spread over event time at `--clicks_per_minute`,
writes them as JSON Lines, and runs the whole job (`pipelines.photon.build`:
readers, `PhotonJoin`, JSONL sinks) on each runner against one Bigtable
emulator (started here, or `$BIGTABLE_EMULATOR_HOST`), each run on fresh
tables. Joined clicks/s is joined clicks over the wall time of
`pipeline.run()` to the end of the job; every run's output is checked against
the generator's truth. Prints each runner's median, then the ratio
SparkRunner / DirectRunner (`--runner=SparkRunner` is this project's runner).
The Spark session is started, and a first small job run on it, before any
run is timed: its start-up (a JVM, the Python workers) is no part of either
runner's join. The emulator shares the machine's cores with the job. At the
default size, a million clicks, each runner takes about 6 minutes or less on
2 cores (see docs/photon.md), so one run each is the default; `--runs N`
alternates the runners N times and takes the medians.

With `--streaming` it measures Photon live instead (`photon_streaming.py`:
joined clicks/s and click-to-output latency against Structured Streaming's
stream-stream join); the flags after `--streaming` are that mode's.
"""

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from pipelines.outputs import read_output  # noqa: E402
from pipelines.photon import build  # noqa: E402
from pipelines.runner_choice import choose_runner  # noqa: E402
from testing.bigtable_emulator import BigtableEmulator  # noqa: E402
from testing.photon_generator import MINUTE_MS, PhotonSpec, generate  # noqa: E402
from transforms.photon import (  # noqa: E402
    JOINED,
    BigtableTarget,
    JoinParams,
    PhotonJoin,
    RegistryParams,
)
from transforms.records.photon_pb2 import JoinedClick  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Read by `main` before these flags: the live benchmark has its own.
    parser.add_argument(
        "--streaming",
        action="store_true",
        help="Photon live instead (benchmarks/photon_streaming.py; "
        "its flags: --streaming --help)",
    )
    parser.add_argument("--clicks", type=int, default=1_000_000)
    parser.add_argument("--runners", default="DirectRunner,SparkRunner")
    parser.add_argument("--clicks_per_minute", type=float, default=1000.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=JoinParams.shards)
    return parser.parse_args()


def run_once(
    runner_name: str, join: JoinParams, queries, clicks, logs, output: pathlib.Path
) -> float:
    """Joined clicks/s of one run of the job on ``runner_name``."""
    runner, beam_args = choose_runner([f"--runner={runner_name}"])
    target = BigtableTarget("bench", f"photon-{uuid.uuid4().hex[:8]}")
    registry = RegistryParams(now_ms=logs.now_ms)
    transform = PhotonJoin(target, "bench", join, registry)
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    build(pipeline, [str(queries)], [str(clicks)], None, transform, output)
    started = time.perf_counter()
    pipeline.run().wait_until_finish()
    elapsed = time.perf_counter() - started
    joined = read_output(output, JOINED, JoinedClick)
    ids = {j.click.click_id for j in joined}
    if len(joined) != len(ids) or ids != set(logs.joinable):
        raise SystemExit(
            f"{runner_name}: joined {len(joined)} ({len(ids)} distinct), "
            f"expected each of {len(logs.joinable)} joinable clicks once"
        )
    return len(joined) / elapsed


def start_spark() -> None:
    """The session the SparkRunner's runs reuse, up and warm before the
    clock: its first job pays the JVM's and the Python workers' start."""
    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

    session = get_or_create_session(SparkOptions([]))
    session.sparkContext.parallelize(range(100), 2).count()


def main() -> None:
    if "--streaming" in sys.argv[1:]:
        import photon_streaming

        photon_streaming.main([a for a in sys.argv[1:] if a != "--streaming"])
        return
    args = parse_args()
    runners = [name.strip() for name in args.runners.split(",") if name.strip()]
    num_queries = max(1, round(args.clicks / PhotonSpec().clicks_per_query))
    duration_ms = int(args.clicks / args.clicks_per_minute * MINUTE_MS)
    started = time.perf_counter()
    spec = PhotonSpec(num_queries=num_queries, duration_ms=max(duration_ms, 1))
    logs = generate(spec, seed=args.seed)
    join = JoinParams(shards=args.shards)
    rates: dict[str, list[float]] = {name: [] for name in runners}
    if "SparkRunner" in runners:
        start_spark()
    with tempfile.TemporaryDirectory() as tmp, BigtableEmulator() as emulator:
        queries, clicks = logs.write(pathlib.Path(tmp) / "logs")
        print(
            f"{len(logs.clicks)} clicks ({len(logs.joinable)} joinable) and "
            f"{len(logs.queries)} queries over {duration_ms / MINUTE_MS:.0f} "
            f"minutes of event time, generated in "
            f"{time.perf_counter() - started:.0f} s; Bigtable emulator: "
            f"{emulator.source}",
            flush=True,
        )
        for run in range(args.runs):
            for name in runners:
                output = pathlib.Path(tmp) / f"{name}-{run}"
                rate = run_once(name, join, queries, clicks, logs, output)
                rates[name].append(rate)
                print(f"  {name} run {run + 1}: {rate:.0f} joined clicks/s", flush=True)
    print(f"\nPhoton joined clicks/s, median of {args.runs} run(s):")
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in median.items():
        print(f"  {name:<14} {value:8.0f}")
    if {"DirectRunner", "SparkRunner"} <= median.keys():
        ratio = median["SparkRunner"] / median["DirectRunner"]
        print(f"  {'ratio SparkRunner / DirectRunner':<32} {ratio:7.2f}x")


if __name__ == "__main__":
    main()

"""Throughput of a stateful DoFn when every event is a new key: SparkRunner
streaming (durable key groups in SQLite) against the same job in batch
(state in the task's memory), in the same run.

    python benchmarks/streaming_new_keys.py                  # 200k keys, 3 runs
    python benchmarks/streaming_new_keys.py --keys 1000000 --runs 1

The job: N events, each with a key of its own, into the stateful DoFn of
``streaming_state_memory.py`` (a count in value state, an event-time timer
an hour ahead for each new key), on ``local[2]``. Every key's first event
costs a state read that finds nothing, a state write and a timer set; the
end of the input fires every timer, which clears the count. The Spark
session is started before the clock does. Printed: each mode's median
keys per second (all N keys written and their timers fired) and the ratio
of streaming to batch: what the durable store and the micro-batch loop
cost over Beam's per-element state API, which both modes pay.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import TimestampedValue
from streaming_state_memory import KeyCounter

from runners.spark import SparkRunner
from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session

# Event times one tenth of a millisecond apart, from an arbitrary start.
EVENT_STEP_S = 1e-4


def run_once(keys: int, streaming: bool) -> float:
    """Seconds for one run over ``keys`` new keys."""
    flags = ["--spark_master_url=local[2]"]
    if streaming:
        flags += ["--streaming", f"--checkpoint_dir={tempfile.mkdtemp()}"]
    pipeline = beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(flags))
    _ = (
        pipeline
        | beam.Create(range(keys))
        | beam.Map(lambda i: TimestampedValue((f"key-{i}", 1), i * EVENT_STEP_S))
        | beam.ParDo(KeyCounter())
    )
    started = time.monotonic()
    pipeline.run().wait_until_finish()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = get_or_create_session(SparkOptions(["--spark_master_url=local[2]"]))
    spark.sparkContext.setLogLevel("ERROR")
    # Alternating, so a slow spell of the shared machine hits both modes.
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.runs):
        for streaming in (False, True):
            seconds[streaming].append(run_once(args.keys, streaming))
    rates = {mode: args.keys / statistics.median(s) for mode, s in seconds.items()}
    print(f"{args.keys:,} new keys, local[2], median of {args.runs} run(s)")
    for mode, label in ((False, "batch (state in memory)"), (True, "streaming")):
        runs = " / ".join(f"{s:.1f}" for s in seconds[mode])
        print(f"  {label:<24} {rates[mode]:>9,.0f} keys/s   runs {runs} s")
    print(f"  streaming / batch        {rates[True] / rates[False]:>9.2f}x")


if __name__ == "__main__":
    main()

"""Memory of SparkRunner streaming as keyed state grows from 10k to 1M keys.

    python benchmarks/streaming_state_memory.py                 # 10k, 100k, 1M keys
    python benchmarks/streaming_state_memory.py --keys 10000,200000 --rate 10000

For each key count K, one streaming pipeline on SparkRunner ``local[2]``:
an unbounded source (``PeriodicImpulse``) at ``--rate`` events/s with event
time = now, each event keyed to one of K keys in turn, into a stateful DoFn
that keeps a count per key (value state) and sets an event-time timer an
hour ahead for each new key. Every run lasts as long as the largest K
needs to reach all its keys (largest K / rate seconds), so the runs differ
in their number of keys, not in how long they ran: at the end every key
has a state cell and a pending timer.

Printed per K, sampled every 200 ms: the peak RSS of the largest of
Spark's Python worker processes (where the keyed stage's tasks run) and its
ratio to the smallest K's in the same run; the peak of all workers' RSS
together and the most worker processes alive at once (Spark starts one more
when a task is waiting for a free one, so the sum moves in steps of one
process); the JVM's and the driver's peak; and the state's size on disk.
"events in" is the share of the source's events the stateful DoFn counted
before the run stopped (the source's length plus ``--drain`` seconds, which
also covers firing every key's timer once the source ends): below 100%, the
job did not keep up with the rate.
Durable state lives in SQLite key groups on disk, so the workers' memory
should stay flat while the state grows.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from process_memory import PeakRss

from runners.spark import SparkRunner
from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session

# Far enough ahead that no timer fires while the state grows.
TIMER_AHEAD_S = 3600


class KeyCounter(beam.DoFn):
    """A count per key, and a timer per key an hour after its first event.

    State: ``count`` (value state), for the life of the job. Timer:
    ``expiry`` (event time), set once per key; it never fires during the run,
    so every key also holds a pending timer row.
    """

    COUNT = ReadModifyWriteStateSpec("count", VarIntCoder())
    EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)

    def __init__(self):
        self._events = Metrics.counter("benchmark", "events")

    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        count=beam.DoFn.StateParam(COUNT),
        expiry=beam.DoFn.TimerParam(EXPIRY),
    ):
        self._events.inc()
        seen = count.read() or 0
        if not seen:
            expiry.set(timestamp + TIMER_AHEAD_S)
        count.write(seen + 1)

    @on_timer(EXPIRY)
    def expire(self, count=beam.DoFn.StateParam(COUNT)):
        count.clear()


def _is_worker(driver_pid: int):
    def counts(name: str, pid: int) -> bool:
        return name.startswith("python") and pid != driver_pid

    return counts


def run_keys(keys: int, seconds: float, args, work: Path) -> dict:
    """One pipeline over ``keys`` keys for ``seconds``; its memory figures."""
    checkpoint = work / f"checkpoint-{keys}"
    start = time.time()
    rate = args.rate
    options = PipelineOptions(
        ["--streaming", f"--checkpoint_dir={checkpoint}"],
    )
    pipeline = beam.Pipeline(runner=SparkRunner(), options=options)
    _ = (
        pipeline
        | PeriodicImpulse(
            start_timestamp=start,
            stop_timestamp=start + seconds,
            fire_interval=1 / rate,
        )
        | "Key" >> beam.Map(lambda t: (str(round((t - start) * rate) % keys), 1))
        | beam.ParDo(KeyCounter())
    )
    driver = os.getpid()
    with (
        PeakRss(_is_worker(driver)) as workers,
        PeakRss(lambda name, _pid: name == "java") as jvm,
        PeakRss(lambda _name, pid: pid == driver) as driver_rss,
    ):
        result = pipeline.run()
        result.wait_until_finish(duration=int((seconds + args.drain) * 1000))
        result.cancel()
        result.wait_until_finish()
    counted = result.metrics().query(MetricsFilter().with_name("events"))["counters"]
    state = sum(
        f.stat().st_size for f in (checkpoint / "state").rglob("*") if f.is_file()
    )
    return {
        "keys": keys,
        "seconds": time.time() - start,
        "events": sum(c.committed or 0 for c in counted),
        "expected": round(seconds * rate),
        "workers": workers.peak / 2**20,
        "largest": workers.largest / 2**20,
        "processes": workers.processes,
        "jvm": jvm.peak / 2**20,
        "driver": driver_rss.peak / 2**20,
        "state": state / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="10000,100000,1000000")
    parser.add_argument("--rate", type=int, default=20000, help="events per second")
    parser.add_argument(
        "--drain", type=float, default=10, help="seconds after the source ends"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = get_or_create_session(SparkOptions(["--spark_master_url=local[2]"]))
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="streaming-state-memory-"))
    keys = [int(k) for k in args.keys.split(",")]
    seconds = max(keys) / args.rate
    rows = [run_keys(k, seconds, args, work) for k in keys]
    base = rows[0]["largest"]
    print(f"rate {args.rate:,} events/s, local[2]; peak RSS in MiB")
    print(
        "     keys  run s  events in  largest worker  ratio  workers (n)     JVM"
        "  driver  state on disk"
    )
    for row in rows:
        print(
            f"{row['keys']:>9,} {row['seconds']:>6.0f} "
            f"{row['events'] / row['expected']:>9.1%} {row['largest']:>15.0f} "
            f"{row['largest'] / base:>6.2f} {row['workers']:>8.0f} "
            f"({row['processes']}) {row['jvm']:>7.0f} {row['driver']:>7.0f} "
            f"{row['state']:>10.0f} MiB"
        )


if __name__ == "__main__":
    main()

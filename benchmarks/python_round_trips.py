"""What one JVM-to-Python round trip costs a Spark task, over TCP and over
Unix domain sockets.

    python benchmarks/python_round_trips.py

Every PythonRDD a task computes sends its input to a Python worker and reads
the output back. A micro-batch of a live pipeline chains a dozen of them
(each stage's outputs, filtered out of one persisted RDD, into the batch's
final union), so their fixed cost is most of a small batch's time. This
runs one task that unions `n` trivial PythonRDDs, for a few `n`, under each
setting of `spark.python.unix.domain.socket.enabled`, in fresh `local[2]`
sessions in the same run, and prints the median job time, the cost per
extra round trip, and the ratio TCP / Unix. The runner's sessions use Unix
sockets (`runners/spark/session.py`).
"""

from __future__ import annotations

import argparse
import statistics
import time

from pyspark.sql import SparkSession

from runners.spark.session import ensure_python_env


def _plus_one(values):
    return (v + 1 for v in values)


def job_seconds(spark, hops: int, repeats: int) -> float:
    """Median time of a one-task job computing `hops` chained PythonRDDs."""
    sc = spark.sparkContext
    times = []
    for _ in range(repeats):
        rdds = [
            sc.parallelize([1, 2, 3], 1).mapPartitions(_plus_one) for _ in range(hops)
        ]
        started = time.perf_counter()
        sc.union(rdds).coalesce(1).collect()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(unix_sockets: bool, hops: list[int], repeats: int) -> dict[int, float]:
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.unix.domain.socket.enabled", str(unix_sockets).lower())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        job_seconds(spark, max(hops), 2)  # start the workers before timing
        return {n: job_seconds(spark, n, repeats) for n in hops}
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hops", default="1,5,10,20")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    ensure_python_env()
    hops = sorted(int(n) for n in args.hops.split(","))
    tcp = measure(False, hops, args.repeats)
    unix = measure(True, hops, args.repeats)
    print(f"{'PythonRDDs in a task':<22} {'TCP s':>8} {'Unix s':>8} {'TCP/Unix':>9}")
    for n in hops:
        print(f"{n:<22} {tcp[n]:>8.3f} {unix[n]:>8.3f} {tcp[n] / unix[n]:>8.2f}x")
    span = hops[-1] - hops[0]
    if span:
        per_tcp = (tcp[hops[-1]] - tcp[hops[0]]) / span * 1000
        per_unix = (unix[hops[-1]] - unix[hops[0]]) / span * 1000
        print(
            f"each extra round trip: TCP {per_tcp:.1f} ms, Unix {per_unix:.1f} ms "
            f"({per_tcp / per_unix:.1f}x)"
        )


if __name__ == "__main__":
    main()

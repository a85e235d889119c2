"""How long a fresh SparkRunner job takes to start, with and without the
driver JVM's class archive.

    python benchmarks/spark_start.py [--runs 3]

A one-shot job (the CLI run once) pays the JVM's start and the first Python
worker's before any work. Each run here is a fresh interpreter that creates
the session as the runner does (`runners.spark.session`) and runs a small
Beam pipeline on `local[2]` (`class_archive.add_small_job`).
Runs alternate between the archive of `python -m runners.spark.class_archive`
(built first if there is none) and an empty cache folder, so no archive.
Printed: each run's seconds to a ready session and to the pipeline's end,
the medians, and the ratio without / with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runners.spark import class_archive  # noqa: E402

# What each fresh interpreter runs: the two times since its start, as JSON.
_ONE_RUN = """
import json, time
started = time.perf_counter()
import apache_beam as beam
from runners.spark import SparkRunner
from runners.spark.class_archive import add_small_job
from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session

options = SparkOptions(["--spark_master_url=local[2]"])
get_or_create_session(options)
session_s = time.perf_counter() - started
with beam.Pipeline(runner=SparkRunner(), options=options) as p:
    add_small_job(p)
print(json.dumps({"session": session_s, "job": time.perf_counter() - started}))
"""


def one_run(cache: Path) -> dict[str, float]:
    """Seconds to a ready session and to the job's end, in a fresh process
    whose archive folder is `cache`."""
    done = subprocess.run(
        [sys.executable, "-c", _ONE_RUN],
        env={**os.environ, class_archive.CACHE_ENV: str(cache)},
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    archive = class_archive.archive_path()
    if not archive.is_file():
        print("no class archive yet: building it")
        class_archive.build()
    print(f"archive: {archive}")
    runs: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as empty:
        for i in range(args.runs):
            for kind, cache in (("with", archive.parent), ("without", Path(empty))):
                times = one_run(cache)
                runs[kind].append(times)
                print(
                    f"run {i + 1} {kind:>7} archive: session {times['session']:5.2f} s,"
                    f" job done {times['job']:5.2f} s"
                )
    medians = {
        kind: {
            key: statistics.median(t[key] for t in times) for key in ("session", "job")
        }
        for kind, times in runs.items()
    }
    print()
    print(f"{'':>16}{'session s':>11}{'job done s':>12}")
    for kind in ("with", "without"):
        m = medians[kind]
        print(f"{kind + ' archive':>16}{m['session']:>11.2f}{m['job']:>12.2f}")
    ratio = {
        key: medians["without"][key] / medians["with"][key] for key in medians["with"]
    }
    print(f"{'without / with':>16}{ratio['session']:>10.2f}x{ratio['job']:>11.2f}x")


if __name__ == "__main__":
    main()

"""Detection quality of Zeitgeist on generated streams with ground truth.

    python benchmarks/zeitgeist_quality.py [--queries 100] [--days 3] [--seeds 1 2 3]

For each seed, a stream of `--queries` queries over `--days` days at 5-minute
windows, with spikes and dips injected at 4-8 standard deviations, runs
through the `Zeitgeist` transform on the DirectRunner (records pre-aggregated
per window so the run is quick; the transform sees the same counts either
way). Printed per seed: episode precision, recall and F1 per kind and median
detection delay in windows, for episodes of magnitude >= 3 sigma; and false
alarms per query-week on the same traffic with no episodes at all.

The baseline, computed in the same run on the same counts, is a one-window
rule: |count - trailing 12-window mean| > 4 trailing standard deviations.
Targets: F1 >= 0.9 and median delay <= 2 windows; <= 1 false alarm per
query-week on quiet traffic.
"""

import argparse
import dataclasses
import pathlib
import statistics
import sys
import tempfile

import apache_beam as beam

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from pipelines import config as config_loader  # noqa: E402
from pipelines.outputs import read_output  # noqa: E402
from pipelines.zeitgeist import build, zeitgeist_transform  # noqa: E402
from pipelines.zeitgeist_flags import DEFAULT_CONFIG  # noqa: E402
from runners.in_process import InProcessDirectRunner  # noqa: E402
from testing.baselines import one_window_flags  # noqa: E402
from testing.evaluator import evaluate, false_alarms_per_query_week  # noqa: E402
from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate  # noqa: E402
from transforms.records.zeitgeist_pb2 import Anomaly  # noqa: E402

MIN_MAGNITUDE_SIGMA = 3.0


@dataclasses.dataclass
class Baseline:
    """A flagged (query, kind, window_start), shaped like an Anomaly."""

    query: str
    kind: str
    window_start: int


def run_zeitgeist(stream, workdir: pathlib.Path) -> list[Anomaly]:
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "searches.parquet"
    stream.write_parquet(source)
    config = config_loader.read(DEFAULT_CONFIG)
    with beam.Pipeline(runner=InProcessDirectRunner()) as pipeline:
        build(pipeline, [str(source)], None, zeitgeist_transform(config), workdir, [])
    return read_output(workdir, "anomalies", Anomaly)


def one_window_baseline(stream, spec: StreamSpec) -> list[Baseline]:
    """`testing.baselines.one_window_flags` over each query's counts."""
    flagged = []
    for q, counts in enumerate(stream.counts):
        for w, z in one_window_flags(counts):
            kind = "SPIKE" if z > 0 else "DIP"
            start = spec.start_ms + w * spec.window_ms
            flagged.append(Baseline(stream.query_names[q], kind, start))
    return flagged


def measure(seed: int, queries: int, days: float) -> dict:
    spec = StreamSpec(
        num_queries=queries, duration_ms=int(days * DAY_MS), aggregate=1.0
    )
    with tempfile.TemporaryDirectory() as tmp:
        stream = generate(spec, seed)
        found = run_zeitgeist(stream, pathlib.Path(tmp) / "episodes")
        report = evaluate(
            found,
            stream.episodes,
            spec.window_ms,
            min_magnitude_sigma=MIN_MAGNITUDE_SIGMA,
        )
        baseline = evaluate(
            one_window_baseline(stream, spec),
            stream.episodes,
            spec.window_ms,
            min_magnitude_sigma=MIN_MAGNITUDE_SIGMA,
        )
        quiet = generate(spec.quiet(), seed)
        quiet_found = run_zeitgeist(quiet, pathlib.Path(tmp) / "quiet")
        alarms = false_alarms_per_query_week(
            quiet_found, queries, spec.duration_ms, spec.window_ms
        )
    return {"report": report, "baseline": baseline, "alarms": alarms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--days", type=float, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    f1s, base_f1s, delays, alarms = [], [], [], []
    for seed in args.seeds:
        result = measure(seed, args.queries, args.days)
        report, baseline = result["report"], result["baseline"]
        print(f"== seed {seed}: Zeitgeist")
        print(report.format())
        print(f"-- seed {seed}: one-window baseline")
        print(baseline.format())
        print(
            f"-- seed {seed}: false alarms per query-week, no episodes: "
            f"{result['alarms']:.3f}\n"
        )
        f1s.append(report.overall.f1)
        base_f1s.append(baseline.overall.f1)
        delays.append(report.overall.median_delay)
        alarms.append(result["alarms"])
    f1, base = statistics.median(f1s), statistics.median(base_f1s)
    print("== medians over seeds")
    print(
        f"F1 {f1:.3f} (target >= 0.9); baseline F1 {base:.3f}; "
        f"ratio {f1 / base if base else float('inf'):.2f}x"
    )
    print(f"median delay {statistics.median(delays):.1f} windows (target <= 2)")
    print(f"false alarms per query-week {statistics.median(alarms):.3f} (target <= 1)")


if __name__ == "__main__":
    main()

"""Detection quality of Zeitgeist on real labelled series, by NAB's rules.

    python benchmarks/zeitgeist_real.py --data ../shared/data/labelled-series

Every series of the folder (NAB's layout, see `testing.labelled_series`) goes
through the real job, `python -m pipelines.zeitgeist --write_scores`, with
the default configuration, as pre-aggregated counts: one CSV row
`query,event_time,count` per series row, the query being the series' name.

- Row i of a series becomes window i of its query (event time = the first
  timestamp + i buckets), so that rows map to windows one to one: a few
  series have duplicate, missing or out-of-order timestamps, and NAB scores
  rows. The bucket is the series' most common spacing, and it is the run's
  window size (one run per bucket size): the data's resolution, not tuning.
- Values that are not whole numbers are scaled by the power of ten that
  brings the median of the non-zero values to 1000 or more, then rounded;
  negative values (one artificial series dips below zero) are counted as
  zero.

Printed for every category of the folder, normalised NAB scores (standard
profile) twice: the score stream at the single threshold that is best over
all series, and the alerts as emitted (each alert's window is a detection);
then the baseline measured in the same run, a naive one-window z rule
(`testing.baselines`: a row more than 4 spreads from the 12 rows before it,
one alert per run of such rows), and the alerts' gain over it in points
(NAB's scale goes below zero, where a ratio says nothing); beside them
the published anchors of the data README, for its categories;
then episode precision, recall, F1 and median delay (rows) of the alerts; a
last row pooling every category with scored windows; and the alerts per
series per week on each category without labelled windows, with the count
of them after NAB's probation (the first 15 % of a file's rows, which NAB
leaves unscored, for every detector). Targets: alerts
as emitted at least the best published figure on every real category, no
alert on artificialNoAnomaly. Any folder in NAB's layout reports the same
way, a held-out set or a user's own; its categories need not be these.

    python benchmarks/zeitgeist_real.py --data ../shared/data/labelled-series \
        --in_process [--set detector.threshold=6 ...]

`--in_process` skips the job and replays each series through
`SeriesJudge`, the loop a batch job runs over each query's series
(`forecast.fold`, `update_confidence`, `episodes.advance`), in the same
row-to-window mapping and scaling, with
the same configuration file and `--set` overrides as the job: seconds
instead of minutes, for iterating on the model and detector. It stands in
for the job only while the two agree: the job also orders, counts and
shuffles, and a change to those is measured by the default mode.

    python benchmarks/zeitgeist_real.py --data ../shared/data/labelled-series \
        --in_process --per_file --reference ARTime=0.317486

`--per_file` adds a row per labelled file: windows, windows caught, false
alerts and NAB raw score of the alerts as emitted, worst first; with
`--reference NAME=THRESHOLD`, beside a reference detector's per-row scores
kept in the folder (`reference-NAME/`) at that threshold, largest loss
first: where the points go, file by file.
"""

import argparse
import collections
import csv
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import NamedTuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from pipelines import config as config_loader  # noqa: E402
from pipelines.outputs import read_output  # noqa: E402
from pipelines.zeitgeist_flags import DEFAULT_CONFIG  # noqa: E402
from testing.baselines import first_of_runs, one_window_flags  # noqa: E402
from testing.labelled_episodes import combined, episode_score  # noqa: E402
from testing.labelled_series import Series, load_folder, reference_scores  # noqa: E402
from testing.nab import (  # noqa: E402
    LabelledFile,
    best_threshold,
    normalised,
    raw_score,
    raw_score_of_detections,
)
from transforms.records.zeitgeist_pb2 import (  # noqa: E402
    Anomaly,
    EpisodeStatus,
    WindowCount,
    WindowScore,
)
from transforms.zeitgeist.batch_detection import SeriesJudge  # noqa: E402
from transforms.zeitgeist.params import DetectorParams, ModelParams  # noqa: E402
from transforms.zeitgeist.query_keys import fold  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
WEEK_S = 7 * 24 * 3600
# From the data README: best published detector, ARTime, Numenta HTM.
ANCHORS = {
    "realKnownCause": (63.9, 63.9, 55.5),
    "realAdExchange": (76.9, 75.1, 76.9),
    "realAWSCloudwatch": (73.4, 69.5, 73.4),
    "realTraffic": (91.2, 86.9, 82.5),
    "artificialWithAnomaly": (76.7, 70.4, 70.2),
}


def bucket_seconds(series: Series) -> int:
    """The series' most common spacing between rows."""
    gaps = collections.Counter(
        int((b - a).total_seconds())
        for a, b in zip(series.timestamps, series.timestamps[1:], strict=False)
    )
    return max((g for g in gaps if g > 0), key=lambda g: gaps[g])


def as_counts(values: tuple[float, ...]) -> list[int]:
    """Whole, non-negative counts, scaled by a power of ten if need be."""
    if all(v == int(v) for v in values):
        return [max(int(v), 0) for v in values]
    median = statistics.median(abs(v) for v in values if v)
    scale = 1
    while median * scale < 1000:
        scale *= 10
    return [max(round(v * scale), 0) for v in values]


def query_name(series: Series) -> str:
    """The series' query, as the job keys it (case-folded)."""
    return fold(series.name.removesuffix(".csv"))


def first_window_ms(series: Series, bucket_s: int) -> int:
    first_s = int(series.timestamps[0].timestamp())
    return (first_s - first_s % bucket_s) * 1000


def write_input(path: pathlib.Path, group: list[Series], bucket_s: int) -> None:
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["query", "event_time", "count"])
        for series in group:
            start = first_window_ms(series, bucket_s)
            for i, count in enumerate(as_counts(series.values)):
                out.writerow([query_name(series), start + i * bucket_s * 1000, count])


def run_job(workdir: pathlib.Path, bucket_s: int) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.zeitgeist",
            "--input",
            str(workdir / "counts.csv"),
            "--output",
            str(workdir / "out"),
            "--window_seconds",
            str(bucket_s),
            "--write_scores",
        ],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def per_row(series: Series, bucket_s: int, out: pathlib.Path):
    """The series' per-row scores and the rows where alerts opened."""
    start = first_window_ms(series, bucket_s)
    step = bucket_s * 1000
    n = len(series.values)
    query = query_name(series)
    scores = [0.0] * n
    for score in read_output(out, "scores", WindowScore):
        row = (score.window_start - start) // step
        if score.query == query and 0 <= row < n and score.revision == 0:
            scores[row] = score.score
    alerts = sorted(
        (a.window_start - start) // step
        for a in read_output(out, "anomalies", Anomaly)
        if a.query == query and is_alert(a)
    )
    return scores, [row for row in alerts if 0 <= row < n]


def is_alert(anomaly: Anomaly) -> bool:
    """An anomaly record that raises an alert (not an episode's summary)."""
    return anomaly.status not in (EpisodeStatus.CLOSED, EpisodeStatus.OPEN_AT_END)


def run_all(everything: list[Series], workdir: pathlib.Path) -> dict:
    """Every series (a folder's, `load_folder`) through the job, one run per
    bucket size; per series, its bucket, per-row scores and alert rows."""
    groups: dict[int, list[Series]] = collections.defaultdict(list)
    for series in everything:
        groups[bucket_seconds(series)].append(series)
    results = {}
    for bucket_s, group in sorted(groups.items()):
        run_dir = workdir / f"bucket_{bucket_s}"
        run_dir.mkdir()
        write_input(run_dir / "counts.csv", group, bucket_s)
        run_job(run_dir, bucket_s)
        for series in group:
            scores, alerts = per_row(series, bucket_s, run_dir / "out")
            results[series.name] = (series, bucket_s, scores, alerts)
    return results


def replay(
    series: Series, bucket_s: int, model: ModelParams, detector: DetectorParams
) -> tuple[list[float], list[int]]:
    """The series' per-row scores and alert rows, computed in process.

    Row i is window i of the series' query, as in the job; the windows go
    through `SeriesJudge`, the model and detector of a batch job's query.
    """
    query = query_name(series)
    start = first_window_ms(series, bucket_s)
    step = bucket_s * 1000
    judge = SeriesJudge(query, model, detector, step)
    scores, alerts = [], []
    for i, count in enumerate(as_counts(series.values)):
        window_start = start + i * step
        window = WindowCount(
            query=query,
            window_start=window_start,
            window_end=window_start + step,
            count=count,
        )
        judged = judge.judge(window)
        scores.append(judged.verdict.score)
        if judged.record is not None and is_alert(judged.record):
            alerts.append(i)
    return scores, alerts


def run_in_process(everything: list[Series], overrides: list[str]) -> dict:
    """`run_all`'s results from `replay`, with the job's configuration."""
    config = config_loader.apply_overrides(
        config_loader.read(DEFAULT_CONFIG), overrides
    )
    model = ModelParams(**config["model"])
    detector = DetectorParams(**config["detector"])
    results = {}
    for series in everything:
        bucket_s = bucket_seconds(series)
        scores, alerts = replay(series, bucket_s, model, detector)
        results[series.name] = (series, bucket_s, scores, alerts)
    return results


def baseline_alerts(series: Series) -> list[int]:
    """The rows where the naive baseline, measured in the same run, alerts:
    the one-window z rule (`testing.baselines`) over the series' counts, one
    alert per run of flagged rows."""
    flagged = [w for w, _ in one_window_flags(as_counts(series.values))]
    return first_of_runs(flagged)


def report(results: dict) -> str:
    """The per-category table, then the alert rate of series without labels.

    Every category of the folder gets a row, so a folder other than this
    repository's (a held-out set, a user's own) reports the same way; the
    published anchors are shown where the data README gives them. The last
    row pools every file with a scored window, as NAB's corpus score does.
    """
    files = {
        name: LabelledFile(name, scores, series.windows)
        for name, (series, _, scores, _) in results.items()
    }
    threshold, _ = best_threshold(list(files.values()))
    by_category = collections.defaultdict(list)
    for name, (series, _, _, _) in results.items():
        by_category[series.category].append(name)
    scored = {c: n for c, n in by_category.items() if _windows(files, n)}
    lines = [
        f"score stream at the best single threshold, {threshold:.6g}",
        f"{'category':<24}{'stream':>8}{'alerts':>8}{'z-rule':>8}{'gain':>7}"
        f"{'best pub':>10}{'ARTime':>8}{'HTM':>6}{'P':>7}{'R':>6}{'F1':>6}"
        f"{'delay':>7}",
    ]
    for category in sorted(scored, key=_anchored_first):
        lines.append(
            _category_row(category, scored[category], files, results, threshold)
        )
    if len(scored) > 1:
        pooled = [n for names in scored.values() for n in names]
        lines.append(_category_row("all scored", pooled, files, results, threshold))
    unlabelled = [c for c in by_category if c not in scored]
    for category in unlabelled:
        lines.append("")
        lines.append(
            f"alerts per series per week on {category}, and alerts after"
            " NAB's probation (the rows its score counts):"
        )
        for name in by_category[category]:
            series, bucket_s, _, alerts = results[name]
            weeks = len(series.values) * bucket_s / WEEK_S
            probation = files[name].probation
            counted = sum(1 for row in alerts if row >= probation)
            lines.append(f"  {name:<56}{len(alerts) / weeks:>6.2f}{counted:>6}")
    return "\n".join(lines)


def per_file_report(
    results: dict, folder: pathlib.Path, reference: tuple[str, float] | None = None
) -> str:
    """One row per file with a scored window: its windows, those the alerts
    as emitted caught, their false alerts (after the probation, outside
    every window) and their NAB raw score.

    With `reference` (a detector's name and its threshold), the same for
    that detector's per-row scores in the folder (`reference-<name>/`, rows
    at or above the threshold being its detections; "-" for a file it has
    no scores for) and the difference in raw score; rows are sorted by that
    difference, the largest loss first, else by raw score: the files to
    look at come first.
    """
    rows = []
    for name, (series, _, scores, alerts) in results.items():
        labelled = LabelledFile(name, scores, series.windows)
        if not labelled.scored_windows():
            continue
        theirs = None
        if reference is not None:
            detections = _detections(folder, reference, name)
            if detections is not None:
                theirs = _file_figures(labelled, detections)
        ours = _file_figures(labelled, alerts)
        rows.append((name, len(labelled.scored_windows()), ours, theirs))
    header = f"{'file':<62}{'windows':>8}{'caught':>7}{'false':>6}{'raw':>8}"
    if reference is None:
        rows.sort(key=lambda row: row[2].raw)
        return "\n".join(
            [header]
            + [
                f"{name:<62}{windows:>8}{ours.text()}"
                for name, windows, ours, _ in rows
            ]
        )
    # Files the reference has scores for first, the largest loss first.
    rows.sort(key=lambda row: (row[3] is None, row[2].raw - (row[3] or row[2]).raw))
    header += f"  {reference[0] + ':':<8}{'caught':>7}{'false':>6}{'raw':>8}{'diff':>8}"
    lines = [header]
    for name, windows, ours, theirs in rows:
        compared = (
            f"{'-':>7}{'-':>6}{'-':>8}{'-':>8}"
            if theirs is None
            else f"{theirs.text()}{ours.raw - theirs.raw:>+8.2f}"
        )
        lines.append(f"{name:<62}{windows:>8}{ours.text()}  {'':<8}{compared}")
    return "\n".join(lines)


def _detections(
    folder: pathlib.Path, reference: tuple[str, float], name: str
) -> list[int] | None:
    """The rows where a reference detector's score reaches its threshold;
    None if the folder holds no scores of it for series `name`."""
    detector, threshold = reference
    try:
        scores = reference_scores(folder, detector, name)
    except FileNotFoundError:
        return None
    return [row for row, score in enumerate(scores) if score >= threshold]


class FileFigures(NamedTuple):
    """One file's detections judged: windows caught, false alerts (after the
    probation, outside every window) and NAB raw score."""

    caught: int
    false_alerts: int
    raw: float

    def text(self) -> str:
        return f"{self.caught:>7}{self.false_alerts:>6}{self.raw:>8.2f}"


def _file_figures(labelled: LabelledFile, detections: list[int]) -> FileFigures:
    episodes = episode_score(labelled, detections)
    return FileFigures(
        episodes.true_positives,
        episodes.false_positives,
        raw_score_of_detections(labelled, detections),
    )


def _windows(files: dict, names: list[str]) -> int:
    return sum(len(files[n].scored_windows()) for n in names)


def _anchored_first(category: str) -> tuple:
    """The data README's categories in its order, then the others by name."""
    order = list(ANCHORS)
    return (0, order.index(category), "") if category in ANCHORS else (1, 0, category)


def _category_row(
    label: str, names: list[str], files: dict, results: dict, threshold: float
) -> str:
    windows = _windows(files, names)
    stream = sum(raw_score(files[n], threshold) for n in names)
    alerts = sum(raw_score_of_detections(files[n], results[n][3]) for n in names)
    naive = sum(
        raw_score_of_detections(files[n], baseline_alerts(results[n][0])) for n in names
    )
    ours, theirs = normalised(alerts, windows), normalised(naive, windows)
    episodes = combined(episode_score(files[n], results[n][3]) for n in names)
    delay = episodes.median_delay
    anchors = "".join(
        f"{'-' if value is None else f'{value:.1f}':>{width}}"
        for value, width in zip(
            ANCHORS.get(label, (None,) * 3), (10, 8, 6), strict=True
        )
    )
    return (
        f"{label:<24}{normalised(stream, windows):>8.1f}"
        f"{ours:>8.1f}{theirs:>8.1f}{ours - theirs:>+7.1f}{anchors}"
        f"{episodes.precision:>7.2f}{episodes.recall:>6.2f}"
        f"{episodes.f1:>6.2f}{'-' if delay is None else f'{delay:.0f}':>7}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=pathlib.Path, required=True)
    parser.add_argument(
        "--in_process",
        action="store_true",
        help="replay the detector's per-window functions instead of the job",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="with --in_process: override a key of configs/zeitgeist.yaml",
    )
    parser.add_argument(
        "--per_file",
        action="store_true",
        help="also print each labelled file's windows caught, false alerts "
        "and NAB raw score, the worst first",
    )
    parser.add_argument(
        "--reference",
        metavar="NAME=THRESHOLD",
        help="with --per_file: beside a reference detector's per-row scores "
        "in the folder (reference-NAME/), detections at or above THRESHOLD, "
        "e.g. ARTime=0.317486 for shared/data/labelled-series",
    )
    args = parser.parse_args()
    if args.overrides and not args.in_process:
        parser.error("--set is for --in_process runs")
    try:
        everything = load_folder(args.data)
    except (OSError, ValueError) as exc:
        parser.error(f"{args.data} is not a labelled folder in NAB's layout: {exc}")
    reference = None
    if args.reference is not None:
        if not args.per_file:
            parser.error("--reference is for --per_file reports")
        detector, _, threshold = args.reference.partition("=")
        try:
            reference = (detector, float(threshold))
        except ValueError:
            parser.error(f"--reference wants NAME=THRESHOLD, got {args.reference!r}")
        if not detector or not (args.data / f"reference-{detector}").is_dir():
            parser.error(f"no reference-{detector}/ folder in {args.data}")
    if args.in_process:
        results = run_in_process(everything, args.overrides)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = run_all(everything, pathlib.Path(tmp))
    print(report(results))
    if args.per_file:
        print()
        print(per_file_report(results, args.data, reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m pipelines.zeitgeist`: spike and dip detection over search logs.

    python -m pipelines.zeitgeist --output /tmp/z                 # generated
    python -m pipelines.zeitgeist --input 'logs/*.jsonl' --output /tmp/z
    python -m pipelines.zeitgeist --output /tmp/z --runner=SparkRunner
    python -m pipelines.zeitgeist --input 'inbox/*.jsonl' --follow \
        --output /tmp/z-live --runner=SparkRunner --checkpoint_dir /tmp/z-ck
    python -m pipelines.zeitgeist --input 'logs/*.jsonl' --output /tmp/z \
        --model_store=bigtable --bigtable_project P --bigtable_instance I

Without `--input` the job generates a deterministic synthetic stream (seeded,
with injected spikes and dips, see `testing.zeitgeist_generator`), writes it
under OUTPUT/generated/, reads it back like any input and, at the end, scores
the anomalies against the injected ground truth.

OUTPUT receives anomalies*.jsonl, late*.jsonl and dead_letters*.jsonl, and on
request window_counts*.jsonl, scores*.jsonl and report.html. Beam's flags
(`--runner`, `--direct_num_workers`, `--spark_master_url`, ...) go to Beam;
a flag neither knows, or an `--input` matching no file, is an error (one
line on stderr, exit status 2, see `pipelines.cli`).

With `--follow` the job runs live (in streaming) on the files that keep
arriving in `--input`'s directory, each read once, with a watermark from the
records' event times (`transforms.records.follow`); outputs are written as
numbered parts while it runs (`transforms.records.json_parts`). Ctrl-C or
SIGTERM stops it after the running batch commits and prints the summary;
the same command with the same `--checkpoint_dir` resumes where it stopped.

With `--model_store=bigtable` each query's model is seeded from, and
persisted to, the Bigtable `models` table, so a later run continues from
where this one stopped. It needs a real Bigtable instance (or an emulator
already running, via `$BIGTABLE_EMULATOR_HOST`): an emulator started for
the run alone would forget the models when the run ends.
"""

import argparse
import logging
import pathlib
import sys
import time
from collections.abc import Callable, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines import cli, live, live_flags, zeitgeist_live
from pipelines import config as config_loader
from pipelines.outputs import (
    REPORT_NAME,
    WriteOutputs,
    read_output,
    write_at_end,
    write_parts,
)
from pipelines.runner_choice import choose_runner, runs_on_beam
from pipelines.summary import (
    counter_totals,
    followed_files_rows,
    format_table,
    unreadable_rows,
)
from pipelines.zeitgeist_flags import load_config, parse_args
from transforms.millwheel.event_time import WithEventTimestamps
from transforms.millwheel.lateness import LateDataPolicy
from transforms.records.follow import FollowSearchQueries
from transforms.records.readers import DEAD_LETTERS, RECORDS
from transforms.records.search_batches import ReadSearchBatches
from transforms.records.zeitgeist_pb2 import Anomaly
from transforms.zeitgeist.composite import (
    ANOMALIES,
    LATE_RECORDS,
    SCORES,
    WINDOW_COUNTS,
    Zeitgeist,
)
from transforms.zeitgeist.params import (
    DetectorParams,
    ModelParams,
    ModelStoreConfig,
    WindowParams,
)
from transforms.zeitgeist.query_keys import normalizer

_log = logging.getLogger("pipelines.zeitgeist")
METRIC_NAMESPACES = ("millwheel.records", "millwheel.dedup", "millwheel.zeitgeist")


def zeitgeist_transform(config: config_loader.Config) -> Zeitgeist:
    """The `Zeitgeist` transform the config describes."""
    window = config["window"]
    late_data = LateDataPolicy(
        window["late_policy"], int(window["allowed_lateness_seconds"] * 1000)
    )
    return Zeitgeist(
        window=WindowParams(
            size_ms=int(window["size_seconds"] * 1000),
            activity_horizon_windows=int(window["activity_horizon_windows"]),
            late_data=late_data,
        ),
        model=ModelParams(**config["model"]),
        detector=DetectorParams(**config["detector"]),
        key_fn=normalizer(config["keys"]["normalization"]),
        dedup_horizon_ms=int(config["dedup"]["horizon_seconds"] * 1000),
        model_store=model_store_config(config),
    )


def model_store_config(config: config_loader.Config) -> ModelStoreConfig | None:
    """The configured model store, or None; one per run (it carries a run id)."""
    store = config["model_store"]
    kind = store["kind"]
    if kind == "none":
        return None
    if kind != "bigtable":
        raise config_loader.ConfigError(
            f"model_store.kind must be none or bigtable, got {kind!r}"
        )
    if not store["project"] or not store["instance"]:
        raise config_loader.ConfigError(
            "model_store.kind=bigtable needs a Bigtable project and instance: "
            "give --bigtable_project and --bigtable_instance (or set "
            "model_store.project and model_store.instance)"
        )
    return ModelStoreConfig(
        str(store["project"]), str(store["instance"]), str(store["table"])
    )


def generate_input(config: config_loader.Config, output: pathlib.Path) -> pathlib.Path:
    """Write the configured synthetic stream and its ground truth; return it."""
    from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate

    settings = config["generator"]
    spec = StreamSpec(
        num_queries=int(settings["num_queries"]),
        duration_ms=int(float(settings["days"]) * DAY_MS),
        window_ms=int(config["window"]["size_seconds"] * 1000),
    )
    stream = generate(spec, seed=int(settings["seed"]))
    folder = output / "generated"
    folder.mkdir(parents=True, exist_ok=True)
    stream.write_parquet(folder / "searches.parquet")
    stream.write_episodes(folder / "episodes.json")
    _log.info(
        "generated %d records over %d queries, %d episodes, into %s",
        len(stream),
        spec.num_queries,
        len(stream.episodes),
        folder,
    )
    return folder / "searches.parquet"


ReadInput = Callable[[str, str | None], beam.PTransform]


def build(
    pipeline: beam.Pipeline,
    inputs: Sequence[str],
    input_format: str | None,
    transform: Zeitgeist,
    output: pathlib.Path,
    extra_outputs: Sequence[str],
    read: ReadInput | None = None,
    write: WriteOutputs = write_at_end,
) -> None:
    """Wire sources, the Zeitgeist transform and the sinks into `pipeline`.

    `read(pattern, format)` reads one `--input` into `RECORDS` and
    `DEAD_LETTERS` (e.g. followed files), record by record; None reads the
    files as they are, in Arrow tables (`ReadSearchBatches`, counted by
    `transform.on_batches()`). `write` writes the outputs, each under its
    path prefix (at the end, or in parts while the job runs). Scores are
    built only if `extra_outputs` names them.
    """
    if SCORES not in extra_outputs:
        transform = transform.without_scores()
    columnar = read is None
    read = read or ReadSearchBatches
    records, dead = [], []
    for i, pattern in enumerate(inputs):
        read_input = pipeline | f"Read{i}" >> read(pattern, input_format)
        records.append(read_input[RECORDS])
        dead.append(read_input[DEAD_LETTERS])
    merged = records | "MergeInputs" >> beam.Flatten()
    if columnar:
        # Each table's partial counts are stamped with their event times.
        outputs = merged | "Zeitgeist" >> transform.on_batches()
    else:
        searches = merged | "EventTime" >> WithEventTimestamps()
        outputs = searches | "Zeitgeist" >> transform
    dead.append(outputs[DEAD_LETTERS])
    sinks = {
        ANOMALIES: outputs[ANOMALIES],
        LATE_RECORDS: outputs[LATE_RECORDS],
        DEAD_LETTERS: dead | "MergeDeadLetters" >> beam.Flatten(),
    }
    for name in extra_outputs:
        sinks[name] = outputs[name]
    write({str(output / name): pcoll for name, pcoll in sinks.items()})


def summary(result, elapsed_s: float, output: pathlib.Path) -> str:
    totals = counter_totals(result, METRIC_NAMESPACES)

    def get(name: str) -> int:
        return totals.get(name, 0)

    dead = get("millwheel.records/dead_letters") + get(
        "millwheel.zeitgeist/dead_letters"
    )
    rows = [
        ("records read", get("millwheel.records/records_read")),
        *followed_files_rows(totals),
        ("windows emitted", get("millwheel.zeitgeist/windows_emitted")),
        ("  of which zero-count", get("millwheel.zeitgeist/zero_windows_emitted")),
        ("spike episodes", get("millwheel.zeitgeist/spikes_detected")),
        ("dip episodes", get("millwheel.zeitgeist/dips_detected")),
        ("  of which closed", get("millwheel.zeitgeist/episodes_closed")),
        ("duplicates dropped", get("millwheel.dedup/duplicates")),
        ("late searches", get("millwheel.zeitgeist/late_searches")),
        ("window corrections", get("millwheel.zeitgeist/window_corrections")),
        # Shown only when it happened: sums past int64, never in real traffic.
        *[
            ("window counts saturated", saturated)
            for saturated in [get("millwheel.zeitgeist/window_counts_saturated")]
            if saturated
        ],
        ("dead letters", dead),
        *unreadable_rows(totals),
        *_model_store_rows(totals),
        ("elapsed", f"{elapsed_s:.1f} s"),
        ("output", str(output)),
    ]
    return format_table("Zeitgeist summary", rows)


_MODEL_STORE_ROWS = (
    ("models seeded from store", "millwheel.zeitgeist/models_seeded"),
    ("models saved to store", "millwheel.zeitgeist/models_saved"),
    ("model writes fenced off", "millwheel.zeitgeist/model_writes_fenced"),
)


def _model_store_rows(totals: dict[str, int]) -> list[tuple[str, int]]:
    # Only runs with a model store have these counters.
    if not any(name in totals for _, name in _MODEL_STORE_ROWS):
        return []
    return [(label, totals.get(name, 0)) for label, name in _MODEL_STORE_ROWS]


def evaluation(output: pathlib.Path, config: config_loader.Config) -> str:
    """Precision/recall of the written anomalies against the generated truth."""
    from testing.evaluator import evaluate
    from testing.zeitgeist_generator import load_episodes

    anomalies = read_output(output, ANOMALIES, Anomaly)
    episodes = load_episodes(output / "generated" / "episodes.json")
    window_ms = int(config["window"]["size_seconds"] * 1000)
    return evaluate(anomalies, episodes, window_ms).format()


def warn_of_stale_outputs(
    output: pathlib.Path, extra: Sequence[str], report: bool
) -> None:
    """Warns of optional outputs an earlier run left in `output` that this
    run does not write: read beside the new ones, they pass for this run's.
    """
    stale = [
        f"{name}*.jsonl"
        for name in (WINDOW_COUNTS, SCORES)
        if name not in extra and any(output.glob(f"{name}*.jsonl"))
    ]
    if not report and (output / REPORT_NAME).exists():
        stale.append(REPORT_NAME)
    if stale:
        _log.warning(
            "%s holds %s from an earlier run, which this run does not write",
            output,
            ", ".join(stale),
        )


def refuse_generator_flags(
    args: argparse.Namespace, generated: bool, live: bool
) -> None:
    """Refuses the generator's flags where no generator runs, and `--rate`
    and `--live_minutes` where the generator is not played live."""
    if not generated:
        cli.refuse_unused(
            args,
            ("seed", "num_queries", "days", "rate", "live_minutes"),
            "sets the generated stream, which --input replaces",
        )
    elif not live:
        cli.refuse_unused(
            args, ("rate", "live_minutes"), "paces the live generator: add --streaming"
        )


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    config = load_config(args)
    generated = not args.input
    # Live: following --input, or (no --input, --streaming) the generator
    # played in real time. Both read a followed directory, in streaming.
    live_generated = (
        generated and PipelineOptions(beam_args).view_as(StandardOptions).streaming
    )
    refuse_generator_flags(args, generated, live_generated)
    if args.follow:
        if generated:
            raise cli.UsageError("--follow needs --input: the files to follow")
        cli.require_directories("--input", args.input)
    else:
        cli.require_matches("--input", args.input)
    cli.require_formats("--input", args.input, args.input_format)
    following = args.follow or live_generated
    if following:
        beam_args = [*beam_args, "--streaming"]
    with cli.usage_errors():
        transform = zeitgeist_transform(config)
        follow = live_flags.follow_settings(config)
    runner, beam_args = choose_runner(beam_args)
    options = PipelineOptions(beam_args)
    if runs_on_beam(runner):
        live.require_streaming_runner(options, args.follow, live_generated)
    output = cli.output_directory("--output", args.output)
    player = stream = None
    resume = live.resumes(options)
    with cli.usage_errors():  # a generator setting it cannot honour
        if live_generated:
            stream, player, inputs = zeitgeist_live.start_live_generator(
                config, output, resume
            )
            follow = live_flags.disorder_of_generated(
                args, follow, zeitgeist_live.LIVE_DISORDER_SECONDS
            )
        elif generated:
            inputs = [str(generate_input(config, output))]
        else:
            inputs = args.input
    extra = [
        name
        for name, wanted in (
            (WINDOW_COUNTS, args.write_window_counts),
            (SCORES, args.write_scores or args.report),
        )
        if wanted
    ]
    warn_of_stale_outputs(output, extra, args.report)
    streaming = options.view_as(StandardOptions).streaming
    pipeline = beam.Pipeline(runner=runner, options=options)
    read: ReadInput | None = None
    if following:

        def read(pattern: str, fmt: str | None) -> beam.PTransform:
            return FollowSearchQueries(pattern, fmt, follow)

    write = (
        write_parts(
            config["live"]["flush_seconds"],
            live.earlier_outputs(resume, live_generated),
        )
        if streaming
        else write_at_end
    )
    with cli.usage_errors():  # e.g. an --input whose format has no name
        build(
            pipeline, inputs, args.input_format, transform, output, extra, read, write
        )
    _log.info(
        "running on %s%s",
        type(pipeline.runner).__name__,
        ", live until stopped (Ctrl-C)" if following else "",
    )
    started = time.monotonic()
    result = live.run_job(
        pipeline,
        streaming,
        zeitgeist_live.status_line,
        METRIC_NAMESPACES,
        config["live"]["status_seconds"],
    )
    if player is not None:
        player.stop()
        zeitgeist_live.write_played_episodes(
            stream, player.played_through_ms, output, resume
        )
    print(summary(result, time.monotonic() - started, output))
    if generated:
        print()
        print(evaluation(output, config))
    if args.report:
        from pipelines.report import write_report

        path = write_report(output, int(config["window"]["size_seconds"] * 1000))
        print(f"\nreport: {path}")
    return 0


if __name__ == "__main__":
    cli.main(run, "python -m pipelines.zeitgeist")

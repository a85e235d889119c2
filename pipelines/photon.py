"""`python -m pipelines.photon`: join clicks with queries, each click once.

    python -m pipelines.photon --output /tmp/p                  # generated, emulator
    python -m pipelines.photon --queries 'q/*.jsonl' --clicks 'c/*.jsonl' \\
        --bigtable_project P --bigtable_instance I --pipeline_id dc-east --output /tmp/p

Without `--queries`/`--clicks` the job generates deterministic logs (seeded;
late queries, clicks before their query, duplicated and orphan clicks, see
`testing.photon_generator`) under OUTPUT/generated/, reads them back like any
input, pins the registry's age clock to the logs' time and, at the end,
checks the output against the generator's ground truth.

Without `--bigtable_project`/`--bigtable_instance` it starts a Bigtable
emulator for the run (or uses `$BIGTABLE_EMULATOR_HOST`). Redundant copies
of the job share one Bigtable and differ by `--pipeline_id`, their token in
the id registry.

OUTPUT receives joined*.jsonl, unjoinable*.jsonl, wasted*.jsonl and
dead_letters*.jsonl. Beam's flags (`--runner`, ...) are passed on to Beam; a
flag neither knows, or a `--queries`/`--clicks` pattern matching no file, is
an error (one line on stderr, exit status 2, see `pipelines.cli`).
"""

import argparse
import contextlib
import dataclasses
import logging
import pathlib
import sys
import time
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli
from pipelines import config as config_loader
from pipelines.outputs import read_output
from pipelines.runner_choice import choose_runner
from pipelines.summary import counter_totals, format_table
from transforms.millwheel.event_time import WithEventTimestamps
from transforms.photon import (
    DEAD_LETTERS,
    JOINED,
    UNJOINABLE,
    WASTED,
    BigtableTarget,
    JoinParams,
    PhotonJoin,
    RegistryLayout,
    RegistryParams,
)
from transforms.photon.registration import check_token
from transforms.records.photon_pb2 import JoinedClick, UnjoinableClick
from transforms.records.readers import DEAD_LETTERS as READ_DEAD_LETTERS
from transforms.records.readers import (
    RECORDS,
    ReadClickEvents,
    ReadQueryEvents,
    WriteJsonLines,
    infer_format,
)

_log = logging.getLogger("pipelines.photon")
DEFAULT_CONFIG = config_loader.CONFIG_DIR / "photon.yaml"
METRIC_NAMESPACES = ("millwheel.records", "millwheel.photon")
LOCAL_BIGTABLE = ("photon-local", "photon-local")


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `photon` and `photon_verify`."""
    parser.add_argument(
        "--queries", action="append", default=[], help="query log file or glob"
    )
    parser.add_argument(
        "--clicks", action="append", default=[], help="click log file or glob"
    )
    parser.add_argument("--input_format", choices=("jsonl", "csv", "parquet"))
    parser.add_argument("--output", required=True, help="output directory")
    config_loader.add_config_arguments(parser, DEFAULT_CONFIG)
    parser.add_argument("--pipeline_id", help="pipeline.id: the registry token")
    parser.add_argument("--bigtable_project")
    parser.add_argument("--bigtable_instance")
    parser.add_argument("--gc_days", type=int, help="registry.gc_days")
    parser.add_argument("--now_ms", type=int, help="registry.now_ms (age clock)")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags, and the Beam flags left over; `cli.UsageError` if any
    flag is unknown to both."""
    parser = cli.Parser(
        prog="python -m pipelines.photon", description=__doc__.split("\n\n")[0]
    )
    add_common_args(parser)
    parser.add_argument("--max_wait_seconds", type=float)
    parser.add_argument("--query_ttl_seconds", type=float)
    parser.add_argument("--seed", type=int, help="generator.seed")
    parser.add_argument("--num_queries", type=int, help="generator.num_queries")
    parser.add_argument(
        "--fail_after_register_fraction",
        type=float,
        default=0.0,
        help="TEST ONLY: drop this fraction of clicks after their registration "
        "commits, as a crash would; photon_verify restores them",
    )
    return parser.parse_known_args(argv)


_FLAG_KEYS = {
    "pipeline_id": "pipeline.id",
    "gc_days": "registry.gc_days",
    "now_ms": "registry.now_ms",
    "max_wait_seconds": "join.max_wait_seconds",
    "query_ttl_seconds": "join.query_ttl_seconds",
    "seed": "generator.seed",
    "num_queries": "generator.num_queries",
}


# Keys whose default does not tell their type: null, or a whole number of a
# unit that may be fractional.
_DECLARED_TYPES = {
    "registry.now_ms": int,
    "registry.slice_minutes": float,
    "join.max_wait_seconds": float,
    "join.query_ttl_seconds": float,
    "join.timer_slot_seconds": float,
    "generator.duration_minutes": float,
    "bigtable.deadline_seconds": float,
}


def load_config(args: argparse.Namespace) -> config_loader.Config:
    """configs/photon.yaml, then --config, then --set, then named flags."""
    return config_loader.from_command_line(
        DEFAULT_CONFIG, args, _FLAG_KEYS, _DECLARED_TYPES
    )


def check_inputs(args: argparse.Namespace) -> None:
    """`cli.UsageError` unless both logs are given (or neither, to generate),
    every pattern matches a file, and the Bigtable flags come together."""
    if bool(args.bigtable_project) != bool(args.bigtable_instance):
        raise cli.UsageError("--bigtable_project and --bigtable_instance go together")
    if bool(args.queries) != bool(args.clicks):
        raise cli.UsageError("give both --queries and --clicks, or neither to generate")
    cli.require_matches("--queries", args.queries)
    cli.require_matches("--clicks", args.clicks)
    if not args.input_format:
        with cli.usage_errors():
            for pattern in [*args.queries, *args.clicks]:
                infer_format(pattern)


def join_params(config: config_loader.Config) -> JoinParams:
    join = config["join"]
    return JoinParams(
        max_wait_ms=int(join["max_wait_seconds"] * 1000),
        query_ttl_ms=int(join["query_ttl_seconds"] * 1000),
        shards=int(join["shards"]),
        timer_slot_ms=int(join["timer_slot_seconds"] * 1000),
    )


def registry_params(
    config: config_loader.Config, fail_after_register_fraction: float = 0.0
) -> RegistryParams:
    registry = config["registry"]
    now_ms = registry["now_ms"]
    return RegistryParams(
        gc_days=int(registry["gc_days"]),
        now_ms=None if now_ms is None else int(now_ms),
        max_batch=int(registry["max_batch"]),
        max_in_flight=int(registry["max_in_flight"]),
        layout=RegistryLayout(
            buckets=int(registry["buckets"]),
            slice_ms=int(registry["slice_minutes"] * 60_000),
        ),
        fail_after_register_fraction=fail_after_register_fraction,
    )


@contextlib.contextmanager
def bigtable_target(
    args: argparse.Namespace, config: config_loader.Config
) -> Iterator[BigtableTarget]:
    """The configured Bigtable, or an emulator started for the block."""
    with contextlib.ExitStack() as stack:
        project, instance = args.bigtable_project, args.bigtable_instance
        if not project:
            from testing.bigtable_emulator import BigtableEmulator

            emulator = stack.enter_context(BigtableEmulator())
            _log.info("Bigtable emulator (%s) at %s", emulator.source, emulator.host)
            project, instance = LOCAL_BIGTABLE
        yield target_of(config, project, instance)


def target_of(
    config: config_loader.Config, project: str, instance: str
) -> BigtableTarget:
    """The configured tables of `project`/`instance` as a `BigtableTarget`."""
    tables = config["bigtable"]
    with cli.usage_errors():
        return BigtableTarget(
            project,
            instance,
            tables["registry_table"],
            tables["events_table"],
            float(tables["deadline_seconds"]),
        )


def generate_input(config: config_loader.Config, output: pathlib.Path) -> dict:
    """Write the configured logs and their truth under OUTPUT/generated/."""
    from testing.photon_generator import MINUTE_MS, PhotonSpec, generate

    settings = config["generator"]
    spec = PhotonSpec(
        num_queries=int(settings["num_queries"]),
        duration_ms=int(settings["duration_minutes"] * MINUTE_MS),
        duplicate_fraction=float(settings["duplicate_fraction"]),
        orphan_fraction=float(settings["orphan_fraction"]),
        late_query_fraction=float(settings["late_query_fraction"]),
        old_clicks=int(settings["old_clicks"]),
        old_age_days=int(config["registry"]["gc_days"]) + 7,
        bad_lines=int(settings["bad_lines"]),
    )
    logs = generate(spec, seed=int(settings["seed"]))
    queries, clicks = logs.write(output / "generated")
    _log.info(
        "generated %d queries and %d clicks into %s",
        len(logs.queries),
        len(logs.clicks),
        queries.parent,
    )
    return {"queries": [str(queries)], "clicks": [str(clicks)], "logs": logs}


def _stamped(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    return pcoll | label >> WithEventTimestamps()


def build(
    pipeline: beam.Pipeline,
    queries: Sequence[str],
    clicks: Sequence[str],
    input_format: str | None,
    transform: PhotonJoin,
    output: pathlib.Path,
) -> None:
    """Wire the log readers, `transform` and the JSONL sinks into `pipeline`."""
    dead = []
    sides = []
    for name, patterns, reader in (
        ("Queries", queries, ReadQueryEvents),
        ("Clicks", clicks, ReadClickEvents),
    ):
        records = []
        for i, pattern in enumerate(patterns):
            read = pipeline | f"Read{name}{i}" >> reader(pattern, input_format)
            records.append(read[RECORDS])
            dead.append(read[READ_DEAD_LETTERS])
        merged = records | f"Merge{name}" >> beam.Flatten()
        sides.append(_stamped(merged, f"EventTime{name}"))
    outputs = tuple(sides) | "PhotonJoin" >> transform
    dead.append(outputs[DEAD_LETTERS])
    sinks = {
        JOINED: outputs[JOINED],
        UNJOINABLE: outputs[UNJOINABLE],
        WASTED: outputs[WASTED],
        DEAD_LETTERS: dead | "MergeDeadLetters" >> beam.Flatten(),
    }
    for name, pcoll in sinks.items():
        pcoll | f"Write_{name}" >> WriteJsonLines(str(output / name))


def summary(result, token: str, elapsed_s: float, output: pathlib.Path) -> str:
    totals = counter_totals(result, METRIC_NAMESPACES)

    def get(name: str) -> int:
        return totals.get(f"millwheel.photon/{name}", 0)

    rows = [
        ("pipeline id (token)", token),
        ("records read", totals.get("millwheel.records/records_read", 0)),
        ("queries stored", get("queries_stored")),
        ("clicks joined", get("clicks_joined")),
        ("  joined from state", get("joined_from_state")),
        ("  joined from event store", get("joined_from_event_store")),
        ("wasted joins", get("wasted_joins")),
        ("duplicate clicks", get("duplicate_clicks")),
        ("duplicate queries", get("duplicate_queries")),
        ("unjoinable: query not found", get("unjoinable_query_not_found")),
        ("unjoinable: older than GC", get("unjoinable_older_than_gc_horizon")),
        ("lost after register (test)", get("lost_after_register")),
        (
            "dead letters",
            totals.get("millwheel.records/dead_letters", 0) + get("dead_letters"),
        ),
        ("elapsed", f"{elapsed_s:.1f} s"),
        ("output", str(output)),
    ]
    return format_table("Photon summary", rows)


def truth_check(output: pathlib.Path, logs) -> str:
    """The written joins and unjoinables against the generator's truth."""
    joined = [j.click.click_id for j in read_output(output, JOINED, JoinedClick)]
    unjoinable = {
        u.click.click_id for u in read_output(output, UNJOINABLE, UnjoinableClick)
    }
    expected = set(logs.joinable)
    rows = [
        ("joinable clicks (truth)", len(expected)),
        ("joined exactly once", len(expected & set(joined))),
        ("missing", len(expected - set(joined))),
        ("output more than once", len(joined) - len(set(joined))),
        ("joined but not joinable", len(set(joined) - expected)),
        (
            "unjoinable as expected",
            f"{len(unjoinable & (logs.orphans | logs.too_old))} of "
            f"{len(logs.orphans | logs.too_old)}",
        ),
    ]
    return format_table("Against the generated truth", rows)


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    check_inputs(args)
    config = load_config(args)
    token = config["pipeline"]["id"]
    with cli.usage_errors():
        check_token(token)
        join = join_params(config)
        registry = registry_params(config, args.fail_after_register_fraction)
    output = pathlib.Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    generated = generate_input(config, output) if not args.queries else None
    if generated and registry.now_ms is None:
        # Generated logs are dated; judge their age by their own clock.
        registry = dataclasses.replace(registry, now_ms=generated["logs"].now_ms)
    queries = generated["queries"] if generated else args.queries
    clicks = generated["clicks"] if generated else args.clicks
    runner, beam_args = choose_runner(beam_args)
    with bigtable_target(args, config) as target:
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
        with cli.usage_errors():
            transform = PhotonJoin(target, token, join, registry)
            build(pipeline, queries, clicks, args.input_format, transform, output)
        _log.info("running %s on %s", token, type(pipeline.runner).__name__)
        started = time.monotonic()
        result = pipeline.run()
        result.wait_until_finish()
        elapsed = time.monotonic() - started
    print(summary(result, token, elapsed, output))
    if generated:
        print()
        print(truth_check(output, generated["logs"]))
    return 0


if __name__ == "__main__":
    cli.main(run, "python -m pipelines.photon")

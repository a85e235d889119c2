"""`python -m pipelines.photon`: join clicks with queries, each click once.

    python -m pipelines.photon --output /tmp/p                  # generated, emulator
    python -m pipelines.photon --queries 'q/*.jsonl' --clicks 'c/*.jsonl' \\
        --bigtable_project P --bigtable_instance I --pipeline_id dc-east --output /tmp/p
    python -m pipelines.photon --queries 'q/*.jsonl' --clicks 'c/*.jsonl' --follow \
        --runner=SparkRunner --checkpoint_dir /tmp/p-ck --output /tmp/p-live
    python -m pipelines.photon --streaming --runner=SparkRunner --output /tmp/p-demo

Without `--queries`/`--clicks` the job generates deterministic logs (seeded;
late queries, clicks before their query, duplicated and orphan clicks, see
`testing.photon_generator`) under OUTPUT/generated/, reads them back like any
input, pins the registry's age clock to the logs' time and, at the end,
checks the output against the generator's ground truth.

With `--follow` the job runs live (in streaming) on the log files that keep
arriving in the `--queries` and `--clicks` directories, each read once, with
each log's watermark estimated from its event times
(`transforms.records.follow`); the joiner's `max_wait` deadlines fire as the
watermarks pass them, and outputs are written as numbered parts while it
runs. With `--streaming` and no logs, generated logs are played in real time
(`pipelines.photon_live`). Ctrl-C or SIGTERM stops it after the running
batch commits and prints the summary; the same command with the same
`--checkpoint_dir` resumes where it stopped.

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
import os
import pathlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines import cli, live, live_flags, photon_live
from pipelines import config as config_loader
from pipelines.output_pipelines import output_id, pipelines_of, record_pipeline
from pipelines.outputs import (
    WriteOutputs,
    read_output,
    settle_earlier_outputs,
    write_at_end,
    write_parts,
)
from pipelines.photon_flags import check_inputs, load_config, parse_args
from pipelines.runner_choice import choose_runner, runs_on_beam
from pipelines.summary import (
    counter_totals,
    followed_files_rows,
    format_table,
    unreadable_rows,
)
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
from transforms.photon.bigtable_retry import BigtableUnavailable, table_exists
from transforms.photon.pipeline_lease import PipelineLease
from transforms.photon.registration import check_token
from transforms.records.follow import (
    FollowClickEvents,
    FollowQueryEvents,
    FollowSettings,
)
from transforms.records.photon_pb2 import JoinedClick, UnjoinableClick
from transforms.records.readers import DEAD_LETTERS as READ_DEAD_LETTERS
from transforms.records.readers import (
    RECORDS,
    ReadClickEvents,
    ReadQueryEvents,
)

_log = logging.getLogger("pipelines.photon")
METRIC_NAMESPACES = ("millwheel.records", "millwheel.photon")
LOCAL_BIGTABLE = ("photon-local", "photon-local")
# The outputs `build` writes, each under OUTPUT/<name>.
OUTPUT_NAMES = (JOINED, UNJOINABLE, WASTED, DEAD_LETTERS)


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
        if project:
            require_credentials(project)
        else:
            emulator = _emulator(config)
            stack.callback(emulator.stop)
            _log.info("Bigtable emulator (%s) at %s", emulator.source, emulator.host)
            project, instance = LOCAL_BIGTABLE
        yield target_of(config, project, instance)


def _emulator(config: config_loader.Config):
    """A started emulator: the one `$BIGTABLE_EMULATOR_HOST` names, which
    should be running already and gets the calls' deadline to answer, or
    one launched here. Stop it when done."""
    from testing.bigtable_emulator import ENV_VAR, BigtableEmulator

    named = os.environ.get(ENV_VAR)
    deadline_s = float(config["bigtable"]["deadline_seconds"])
    emulator = BigtableEmulator(**({"startup_timeout": deadline_s} if named else {}))
    try:
        emulator.start()
    except TimeoutError as error:
        fix = f"start it, or unset {ENV_VAR} to have one started" if named else ""
        raise BigtableUnavailable(f"{error}; {fix}".rstrip("; ")) from None
    return emulator


def require_credentials(project: str) -> None:
    """Refuses a real Bigtable without Google credentials in one line, before
    any client fails with a page of traceback."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    from testing.bigtable_emulator import ENV_VAR

    if os.environ.get(ENV_VAR):
        return  # Google's clients then talk to the emulator, without any.
    # Its warning that no metadata server answered would come before the line.
    probe_log = logging.getLogger("google.auth._default")
    level = probe_log.level
    probe_log.setLevel(logging.ERROR)
    try:
        google.auth.default()
    except DefaultCredentialsError:
        raise cli.UsageError(
            f"no Google credentials for Bigtable project {project!r}: set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service account key or run "
            "'gcloud auth application-default login', or point "
            "BIGTABLE_EMULATOR_HOST at a Bigtable emulator"
        ) from None
    finally:
        probe_log.setLevel(level)


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


def generate_input(config: config_loader.Config, output: pathlib.Path):
    """Write the configured logs and their truth under OUTPUT/generated/;
    return the logs, and the query and click patterns to read."""
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
    return logs, [str(queries)], [str(clicks)]


def _stamped(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    return pcoll | label >> WithEventTimestamps()


def _readers(follow: FollowSettings | None) -> tuple[Callable, Callable]:
    """The query and click log readers: of files as they are, or followed."""
    if follow is None:
        return ReadQueryEvents, ReadClickEvents
    return (
        lambda pattern, fmt: FollowQueryEvents(pattern, fmt, follow),
        lambda pattern, fmt: FollowClickEvents(pattern, fmt, follow),
    )


def build(
    pipeline: beam.Pipeline,
    queries: Sequence[str],
    clicks: Sequence[str],
    input_format: str | None,
    transform: PhotonJoin,
    output: pathlib.Path,
    follow: FollowSettings | None = None,
    write: WriteOutputs = write_at_end,
) -> None:
    """Wire the log readers, `transform` and the JSONL sinks into `pipeline`.

    With `follow`, the logs are the files that keep arriving in the
    patterns' directories (`transforms.records.follow`), in streaming;
    `write` writes the outputs, each under its path prefix (at the end, or
    in parts while the job runs).
    """
    dead = []
    sides = []
    read_queries, read_clicks = _readers(follow)
    for name, patterns, reader in (
        ("Queries", queries, read_queries),
        ("Clicks", clicks, read_clicks),
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
    write({str(output / name): pcoll for name, pcoll in sinks.items()})


def output_prefixes(output: pathlib.Path) -> list[str]:
    """The path prefixes `build` writes its outputs under."""
    return [str(output / name) for name in OUTPUT_NAMES]


def _warn_if_registry_lost(
    target: BigtableTarget, token: str, output: pathlib.Path
) -> None:
    """Warns when this pipeline has written to `output` before and yet the
    id registry does not exist: the registrations of its earlier runs are
    gone (the table deleted, or an emulator restarted empty, as the one a
    command starts for itself always is), so a duplicate of a click it
    joined then, or the same click in another pipeline, can be joined again.
    Nothing tells such a registry from a first run's, so this only warns."""
    with cli.usage_errors():
        ran_here = token in (pipelines_of(output) or ())
    if ran_here and not table_exists(target, target.registry_table):
        _log.warning(
            "pipeline %r has written to %s before, but the id registry table "
            "%r does not exist: the clicks registered in earlier runs are not "
            "in it (the table deleted, or an emulator restarted empty), so a "
            "duplicate of one of them, or the same click in another pipeline, "
            "can be joined again",
            token,
            output,
            target.registry_table,
        )


@contextlib.contextmanager
def _pipeline_id_held(
    target: BigtableTarget,
    registry: RegistryParams,
    token: str,
    output: pathlib.Path,
) -> Iterator[threading.Event]:
    """Holds the pipeline id while the job runs (`PipelineLease`), and fails
    the command if another pipeline took it meanwhile, or the registry table
    lost it (emptied under the job); the block gets the
    event to stop the job on. The holder is the host and the output
    directory: what a restart of this pipeline shares, and a second
    pipeline under the same id does not. The lease also records the
    output's id in the registry, where the verifier looks for this id's
    outputs."""
    holder = f"{socket.gethostname()}:{output.resolve()}"
    with cli.usage_errors():  # a damaged record
        written_to = output_id(output)
    lease = PipelineLease(target, registry.gc_days, token, holder, output_id=written_to)
    try:
        with lease.held() as lost:
            yield lost
        if lost.is_set():
            raise lease.lost_because
    finally:
        lease.close()


def summary(result, token: str, elapsed_s: float, output: pathlib.Path) -> str:
    totals = counter_totals(result, METRIC_NAMESPACES)

    def get(name: str) -> int:
        return totals.get(f"millwheel.photon/{name}", 0)

    rows = [
        ("pipeline id (token)", token),
        ("records read", totals.get("millwheel.records/records_read", 0)),
        *followed_files_rows(totals),
        ("queries stored", get("queries_stored")),
        # What the Joiner made, before the registry says whose each click is:
        # registered here (joined), by another pipeline (wasted), or here
        # before (a re-logged click). Not a breakdown of "clicks joined".
        ("joins made", get("joined_from_state") + get("joined_from_event_store")),
        ("  with the query in state", get("joined_from_state")),
        ("  with the query from the event store", get("joined_from_event_store")),
        ("clicks joined", get("clicks_joined")),
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
        *unreadable_rows(totals),
        ("elapsed", f"{elapsed_s:.1f} s"),
        ("output", str(output)),
    ]
    return format_table("Photon summary", rows)


def age_clock_text(registry: RegistryParams) -> str:
    """The clock clicks' ages are judged by, as a warning names it."""
    if registry.now_ms is None:
        return "the wall clock"
    return f"--now_ms {registry.now_ms}"


def gc_horizon_warning(totals: dict[str, int], registry: RegistryParams) -> str | None:
    """A warning when most clicks were too old to join: logs replayed long
    after they were written are older than the GC horizon by the wall clock,
    and their clicks are counted and set aside, not joined. The clicks young
    enough include those another pipeline joined first (wasted here)."""
    too_old = totals.get("millwheel.photon/unjoinable_older_than_gc_horizon", 0)
    joined = totals.get("millwheel.photon/clicks_joined", 0)
    wasted = totals.get("millwheel.photon/wasted_joins", 0)
    if too_old <= joined + wasted:
        return None
    return (
        f"{too_old} clicks were older than the GC horizon ({registry.gc_days} "
        f"days before {age_clock_text(registry)}) and not joined, against "
        f"{joined} joined; to "
        "replay old logs, set the age clock near their time with --now_ms "
        "(epoch milliseconds)"
    )


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
        follow = live_flags.follow_settings(config)
    generating = not args.queries
    # Live: following the logs' directories, or (no logs, --streaming)
    # generated logs played in real time. Both follow directories.
    live_generated = (
        generating and PipelineOptions(beam_args).view_as(StandardOptions).streaming
    )
    if not generating:
        cli.refuse_unused(
            args,
            ("seed", "num_queries", "rate", "live_minutes"),
            "sets the generated logs, which --queries and --clicks replace",
        )
    elif not live_generated:
        cli.refuse_unused(
            args, ("rate", "live_minutes"), "paces the live generator: add --streaming"
        )
    following = args.follow or live_generated
    if following:
        beam_args = [*beam_args, "--streaming"]
    runner, beam_args = choose_runner(beam_args)
    options = PipelineOptions(beam_args)
    if runs_on_beam(runner):
        live.require_streaming_runner(options, args.follow, live_generated)
    output = cli.output_directory("--output", args.output)
    generated = player = None
    queries, clicks = args.queries, args.clicks
    with cli.usage_errors():  # a generator setting it cannot honour
        if live_generated:
            generated, player, queries, clicks = photon_live.start_live_generator(
                config, output, live.resumes(options)
            )
            follow = live_flags.disorder_of_generated(
                args, follow, photon_live.LIVE_DISORDER_SECONDS
            )
        elif generating:
            generated, queries, clicks = generate_input(config, output)
            if registry.now_ms is None:
                # Generated logs are dated; judge their age by their own clock.
                registry = dataclasses.replace(registry, now_ms=generated.now_ms)
    streaming = options.view_as(StandardOptions).streaming
    write = write_at_end
    if streaming:
        earlier = live.earlier_outputs(live.resumes(options), live_generated)
        # Before an emulator starts: a refusal is one line, at once. The
        # sinks settle them again (idempotently) as the job is built.
        with cli.usage_errors():
            settle_earlier_outputs(output_prefixes(output), earlier)
        write = write_parts(config["live"]["flush_seconds"], earlier)
    with bigtable_target(args, config) as target:
        pipeline = beam.Pipeline(runner=runner, options=options)
        with cli.usage_errors():
            transform = PhotonJoin(target, token, join, registry)
            build(
                pipeline,
                queries,
                clicks,
                args.input_format,
                transform,
                output,
                follow if following else None,
                write,
            )
        _log.info(
            "running %s on %s%s",
            token,
            type(pipeline.runner).__name__,
            ", live until stopped (Ctrl-C)" if following else "",
        )
        # Before the lease creates the registry table, if it is gone.
        _warn_if_registry_lost(target, token, output)
        started = time.monotonic()
        with _pipeline_id_held(target, registry, token, output) as lost:
            # Before any click is registered: photon_verify re-joins only
            # the lost clicks of pipelines whose outputs it is given.
            with cli.usage_errors():
                record_pipeline(output, token)
            result = live.run_job(
                pipeline,
                streaming,
                photon_live.status_line,
                METRIC_NAMESPACES,
                config["live"]["status_seconds"],
                stop_when=lost,
            )
        elapsed = time.monotonic() - started
    if player is not None:
        player.stop()
    print(summary(result, token, elapsed, output))
    if too_old := gc_horizon_warning(
        counter_totals(result, METRIC_NAMESPACES), registry
    ):
        _log.warning("%s", too_old)
    if player is not None:
        print()
        print(photon_live.live_truth_check(output, generated, player.played_through_ms))
    elif generated is not None:
        print()
        print(truth_check(output, generated))
    return 0


if __name__ == "__main__":
    cli.main(run, "python -m pipelines.photon")

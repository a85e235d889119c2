"""`python -m pipelines.photon_verify`: restore clicks lost between commit and write.

    python -m pipelines.photon_verify --queries q.jsonl --clicks c.jsonl \\
        --joined /tmp/dc-east --joined /tmp/dc-west --output /tmp/verify \\
        --bigtable_project P --bigtable_instance I

Reads the click log, the joined outputs (joined*.jsonl in each `--joined`
directory, and what earlier verifications wrote) and the id registry;
reports the clicks that are registered but absent from every output, moves
their registrations to itself and re-runs the join for them under its own
token (`--pipeline_id`, default `<pipeline.id>-verify`, followed by the
output directory), writing joined*.jsonl, unjoinable*.jsonl, wasted*.jsonl
and dead_letters*.jsonl to a new OUTPUT/run-NNNN/. Run it once the pipelines
have finished, with the output of every pipeline that shares the registry:
it refuses a directory that holds no Photon output, and lost clicks of a
pipeline none of the `--joined` directories records (`output_pipelines`),
or whose outputs the registry knows are not those given (one of them an
earlier output of the same id, say), unless `--lost_output` names it as
gone for good. Killed at any point, or
run again, it joins no click twice and loses none (see
`transforms.photon.verification`). `--dry_run` only reports. The Bigtable
defaults to `$BIGTABLE_EMULATOR_HOST` with the project and instance
`pipelines.photon` uses for its own emulator.
"""

import argparse
import collections
import datetime
import logging
import os
import pathlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli, photon, photon_flags
from pipelines.output_pipelines import RECORD, output_id_of, pipelines_of
from pipelines.outputs import read_output
from pipelines.runner_choice import choose_runner
from pipelines.summary import format_table
from transforms.photon import (
    JOINED,
    ClickRef,
    IdRegistry,
    PhotonJoin,
)
from transforms.photon.id_registry import pipeline_token
from transforms.photon.params import RegistryParams
from transforms.photon.pipeline_lease import Holding, outputs_written
from transforms.photon.registration import check_token
from transforms.photon.registry_gc import older_than_horizon
from transforms.photon.verification import (
    Findings,
    find_lost,
    set_aside_too_old,
    take_over_lost,
    verified_into,
    verifier_token,
)
from transforms.records.compressed import open_checked
from transforms.records.file_reader import FileReader
from transforms.records.parse import parse_click_event
from transforms.records.photon_pb2 import ClickEvent, JoinedClick
from transforms.records.readers import DEFAULT_MAX_LINE_BYTES, infer_format

_log = logging.getLogger("pipelines.photon_verify")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = cli.Parser(
        prog="python -m pipelines.photon_verify",
        description=__doc__.split("\n\n")[0],
    )
    photon_flags.add_common_args(
        parser,
        pipeline_id_help="the verifier's name (default: pipeline.id followed by "
        "-verify); its registry token is NAME|verified-into:OUTPUT",
    )
    parser.add_argument(
        "--joined",
        action="append",
        required=True,
        help="an output directory of a Photon pipeline sharing the registry: "
        "give every one each pipeline wrote to within registry.gc_days; "
        "repeatable",
    )
    parser.add_argument(
        "--lost_output",
        action="append",
        default=[],
        metavar="PIPELINE_ID",
        help="this pipeline's output is gone for good: re-join the clicks it "
        "registered that no --joined directory holds; repeatable",
    )
    parser.add_argument("--dry_run", action="store_true", help="only report")
    return parser.parse_known_args(argv)


def logged_clicks(patterns: Sequence[str], input_format: str | None) -> Iterator:
    """The valid click events of the logs (bad lines are the pipelines' concern)."""
    for pattern in patterns:
        fmt = input_format or infer_format(pattern)
        for match in FileSystems.match([pattern])[0].metadata_list:
            reader = FileReader(
                parse_click_event, "ClickEvent", DEFAULT_MAX_LINE_BYTES, match.path
            )
            with open_checked(match.path) as fh:
                for record in reader.read(fmt, fh):
                    if isinstance(record, ClickEvent):
                        yield record


def output_ids(directories: Iterable[str]) -> set[str]:
    """The click ids joined in each directory, or in its verification runs."""
    ids = set()
    for directory in map(pathlib.Path, directories):
        for folder in [directory, *_runs(directory)]:
            ids.update(
                j.click.click_id for j in read_output(folder, JOINED, JoinedClick)
            )
    return ids


def _runs(output: pathlib.Path) -> list[pathlib.Path]:
    """The run directories a verifier wrote under `output`, oldest first."""
    return sorted(output.glob("run-[0-9][0-9][0-9][0-9]"))


def check_joined_directory(directory: str) -> None:
    """Refuses a `--joined` directory that holds no Photon output: read as
    an output that joined nothing, it would make every click its pipeline
    registered look lost."""
    folder = pathlib.Path(directory)
    if not folder.is_dir():
        raise cli.UsageError(f"--joined {directory!r} is not a directory")
    joined = [*folder.glob(f"{JOINED}*.jsonl"), *_runs(folder)]  # or a verifier's
    if pipelines_of(folder) is None and not joined:
        raise cli.UsageError(
            f"--joined {directory!r} holds no Photon output (no {RECORD}, "
            f"no {JOINED}*.jsonl): give the --output directory of each pipeline"
        )


def covered_pipelines(directories: Iterable[str], registry: IdRegistry) -> set[str]:
    """The pipeline ids whose output is among `directories`: those each one
    records, or, for an output written before the record existed, the
    holders of the clicks it joined."""
    covered: set[str] = set()
    for directory in map(pathlib.Path, directories):
        recorded = pipelines_of(directory)
        if recorded is None:
            joined = [
                ClickRef(j.click.click_id, j.click.event_time)
                for folder in [directory, *_runs(directory)]
                for j in read_output(folder, JOINED, JoinedClick)
            ]
            recorded = frozenset(map(pipeline_token, registry.owners(joined).values()))
        covered |= recorded
    return covered


def _holders(findings: Findings, lost_outputs: Iterable[str]) -> collections.Counter:
    """How many lost clicks each pipeline holds, for the pipelines whose
    outputs must be given: not verifiers (whose token names where they
    wrote) nor those named gone for good. A holder is judged by its
    pipeline's token, whatever occurrence of the click it registered."""
    holders = collections.Counter(map(pipeline_token, findings.lost.values()))
    return collections.Counter(
        {
            holder: count
            for holder, count in holders.items()
            if holder not in lost_outputs and verified_into(holder) is None
        }
    )


def refuse_unaccounted(
    findings: Findings, covered: set[str], lost_outputs: Iterable[str]
) -> None:
    """Refuses to re-join clicks of a pipeline whose output was not given.

    Their absence from the outputs given says nothing: the pipeline may
    well have written them where the verifier did not look, and re-joining
    them would output them twice."""
    missing = {
        holder: count
        for holder, count in sorted(_holders(findings, lost_outputs).items())
        if holder not in covered
    }
    if missing:
        named = ", ".join(f"{count} of {holder!r}" for holder, count in missing.items())
        raise cli.UsageError(
            f"clicks registered but in no output given ({named}) were registered "
            "by pipelines whose output is not among the --joined directories: "
            "give each one's --output directory as --joined, or, if an output "
            "is gone for good, name its pipeline with --lost_output"
        )


def refuse_other_outputs(
    findings: Findings,
    joined: Sequence[str],
    lost_outputs: Iterable[str],
    written: Callable[[str], dict[str, Holding]],
    now_ms: int,
    gc_days: int,
) -> None:
    """Refuses to re-join a pipeline's clicks unless the `joined`
    directories recording its id are the outputs the registry knows it
    wrote to (`written`, by output id), all of those within the GC horizon.

    A directory that records the id may be an older output of it, or one
    written against another registry: its joins are not the clicks this
    registry holds, so the clicks of the output not given would look lost
    and be joined twice. An output written before output ids existed has
    none, and the registry knows none for a pipeline last run before then:
    those are judged by their records alone (`refuse_unaccounted`)."""
    problems = []
    for holder in sorted(_holders(findings, lost_outputs)):
        known = written(holder)
        if not known:
            continue
        given = {
            output_id_of(pathlib.Path(directory)): directory
            for directory in joined
            if holder in (pipelines_of(pathlib.Path(directory)) or ())
        }
        problems += [
            f"--joined {directory!r} records pipeline {holder!r}, but is none "
            "of the outputs the id registry knows it wrote to: an output "
            "written against another registry, or past the GC horizon"
            for made_id, directory in given.items()
            if made_id is not None and made_id not in known
        ]
        problems += [
            f"pipeline {holder!r} also wrote to {held.holder} (last at "
            f"{_utc(held.renewed_ms)})"
            for made_id, held in sorted(known.items())
            if made_id not in given
            and older_than_horizon(held.renewed_ms, now_ms, gc_days) is None
        ]
    if problems:
        raise cli.UsageError(
            "; ".join(problems) + ": give every output of each pipeline as "
            "--joined, or, if an output is gone for good, name its pipeline "
            "with --lost_output"
        )


def _utc(epoch_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def find_lost_anywhere(
    logged: list[ClickRef], known: list[str], registry: IdRegistry
) -> Findings:
    """`find_lost` over the `known` directories and those of every verifier
    holding a click that seems lost (its token names where it wrote)."""
    findings = find_lost(logged, output_ids(known), registry)
    others = {
        verified_into(pipeline_token(holder)) for holder in findings.lost.values()
    }
    others = {d for d in others if d is not None and d not in known}
    if not others:
        return findings
    return find_lost(logged, output_ids([*known, *others]), registry)


def rejoin(
    args: argparse.Namespace,
    beam_args: list[str],
    transform: PhotonJoin,
    taken_over: set[str],
    output: pathlib.Path,
) -> None:
    """Run the join over the taken-over clicks and their queries only."""
    runner, beam_args = choose_runner(beam_args)
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    photon.build(
        pipeline,
        args.queries,
        args.clicks,
        args.input_format,
        _OnlyTakenOver(transform, taken_over),
        output,
    )
    pipeline.run().wait_until_finish()


class _OnlyTakenOver(beam.PTransform):
    """`transform` applied to the taken-over clicks and their queries."""

    def __init__(self, transform: PhotonJoin, taken_over: set[str]) -> None:
        super().__init__()
        self._transform = transform
        self._taken_over = taken_over

    def expand(self, inputs):
        queries, clicks = inputs
        taken_over = self._taken_over
        clicks = clicks | "TakenOver" >> beam.Filter(lambda c: c.click_id in taken_over)
        query_ids = beam.pvalue.AsDict(
            clicks | "QueryIds" >> beam.Map(lambda c: (c.query_id, None))
        )
        queries = queries | "TheirQueries" >> beam.Filter(
            lambda q, ids: q.query_id in ids, ids=query_ids
        )
        return (queries, clicks) | "Rejoin" >> self._transform


def too_old_warning(findings: Findings, registry: RegistryParams) -> str:
    """The warning of a run that left lost clicks past the GC horizon."""
    return (
        f"{len(findings.too_old)} clicks registered but in no output are older "
        f"than the GC horizon ({registry.gc_days} days before "
        f"{photon.age_clock_text(registry)}): a "
        "re-join would set them aside, so they are left with the pipelines "
        "that hold them; to re-join logs replayed long after they were "
        "written, run again with --now_ms near their time (epoch milliseconds)"
    )


def report(findings: Findings, token: str, rejoined: int | None) -> str:
    unaccounted = [*findings.lost, *findings.too_old]
    shown = ", ".join(click.click_id for click in unaccounted[:10])
    more = "" if len(unaccounted) <= 10 else f" (+{len(unaccounted) - 10})"
    rows = [
        ("clicks in the log", findings.logged),
        ("in the outputs", findings.output),
        ("registered", findings.registered),
        ("registered, not output", f"{len(unaccounted)} {shown}{more}".strip()),
        ("older than the GC horizon", len(findings.too_old)),
        ("taken over", len(findings.taken_over)),
        ("re-joined", "-" if rejoined is None else f"{rejoined} under {token}"),
    ]
    return format_table("Photon verification", rows)


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.queries or not args.clicks:
        raise cli.UsageError("--queries and --clicks are required")
    photon_flags.check_inputs(args)
    with cli.usage_errors():  # a damaged record of an output's pipelines
        for directory in args.joined:
            check_joined_directory(directory)
    # Before the registry changes: a run must not take clicks over, then fail.
    cli.output_directory("--output", args.output)
    config = photon_flags.load_config(args)
    output = pathlib.Path(args.output).resolve()
    name = args.pipeline_id or f"{config['pipeline']['id']}-verify"
    token = verifier_token(name, str(output))
    if not args.bigtable_project and not os.environ.get("BIGTABLE_EMULATOR_HOST"):
        raise cli.UsageError(
            "give --bigtable_project/--bigtable_instance, or set "
            "BIGTABLE_EMULATOR_HOST to the emulator the pipelines used"
        )
    if args.bigtable_project:
        photon.require_credentials(args.bigtable_project)
    project = args.bigtable_project or photon.LOCAL_BIGTABLE[0]
    instance = args.bigtable_instance or photon.LOCAL_BIGTABLE[1]
    target = photon.target_of(config, project, instance)
    with cli.usage_errors():
        check_token(token)
        params = photon.registry_params(config)
        join = photon.join_params(config)
    registry = IdRegistry(target, params.gc_days, layout=params.layout)
    try:
        logged = [
            ClickRef(c.click_id, c.event_time, query_id=c.query_id)
            for c in logged_clicks(args.clicks, args.input_format)
        ]
        findings = find_lost_anywhere(logged, [*args.joined, str(output)], registry)
        set_aside_too_old(findings, params.age_clock_ms(), params.gc_days)
        refuse_unaccounted(
            findings, covered_pipelines(args.joined, registry), args.lost_output
        )
        refuse_other_outputs(
            findings,
            args.joined,
            args.lost_output,
            lambda holder: outputs_written(target, params.gc_days, holder),
            params.age_clock_ms(),
            params.gc_days,
        )
        if not args.dry_run:
            take_over_lost(findings, registry, token)
    finally:
        registry.close()
    if findings.too_old:
        _log.warning("%s", too_old_warning(findings, params))
    rejoined = None
    if findings.taken_over:
        # A new directory per run: a rerun must not overwrite what an
        # earlier one joined.
        run_dir = output / f"run-{len(_runs(output)) + 1:04d}"
        run_dir.mkdir(parents=True)
        transform = PhotonJoin(target, token, join, params)
        rejoin(args, beam_args, transform, set(findings.taken_over), run_dir)
        rejoined = len(read_output(run_dir, JOINED, JoinedClick))
    print(report(findings, token, rejoined))
    return 0


if __name__ == "__main__":
    cli.main(run, "python -m pipelines.photon_verify")

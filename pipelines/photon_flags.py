"""The command line of `python -m pipelines.photon` and `photon_verify`:
their flags, the config they override (`configs/photon.yaml`, then
`--config`, then `--set`, then the named flags), and the checks of the logs
they name."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pipelines import cli, live_flags
from pipelines import config as config_loader

DEFAULT_CONFIG = config_loader.CONFIG_DIR / "photon.yaml"


def add_common_args(
    parser: argparse.ArgumentParser,
    pipeline_id_help: str = "pipeline.id: the registry token",
) -> None:
    """Flags shared by `photon` and `photon_verify`."""
    parser.add_argument(
        "--queries",
        action="append",
        default=[],
        type=cli.file_pattern,
        help="query log file or glob",
    )
    parser.add_argument(
        "--clicks",
        action="append",
        default=[],
        type=cli.file_pattern,
        help="click log file or glob",
    )
    parser.add_argument("--input_format", choices=("jsonl", "csv", "parquet"))
    parser.add_argument("--output", required=True, help="output directory")
    config_loader.add_config_arguments(parser, DEFAULT_CONFIG)
    parser.add_argument("--pipeline_id", help=pipeline_id_help)
    parser.add_argument("--bigtable_project")
    parser.add_argument("--bigtable_instance")
    parser.add_argument("--gc_days", type=int, help="registry.gc_days")
    parser.add_argument("--now_ms", type=int, help="registry.now_ms (age clock)")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags, and the Beam flags left over; `cli.UsageError` if any
    flag is unknown to both."""
    parser = cli.Parser(
        prog="python -m pipelines.photon",
        description="Photon: join clicks with queries, each click once.",
    )
    add_common_args(parser)
    parser.add_argument("--max_wait_seconds", type=float)
    parser.add_argument("--query_ttl_seconds", type=float)
    parser.add_argument("--seed", type=int, help="generator.seed")
    parser.add_argument("--num_queries", type=int, help="generator.num_queries")
    parser.add_argument(
        "--rate", type=float, help="generator.rate (click records/s, --streaming)"
    )
    parser.add_argument(
        "--live_minutes", type=float, help="generator.live_minutes (--streaming)"
    )
    live_flags.add_live_arguments(
        parser,
        "run live on the logs that keep arriving in the --queries and --clicks "
        "directories, until stopped (implies --streaming)",
    )
    parser.add_argument(
        "--fail_after_register_fraction",
        type=cli.finite_float,
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
    "rate": "generator.rate",
    "live_minutes": "generator.live_minutes",
    **live_flags.FLAG_KEYS,
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
    "generator.rate": float,
    "generator.live_minutes": float,
    **dict.fromkeys(live_flags.FLOAT_KEYS, float),
}


def load_config(args: argparse.Namespace) -> config_loader.Config:
    """configs/photon.yaml, then --config, then --set, then named flags."""
    return config_loader.from_command_line(
        DEFAULT_CONFIG, args, _FLAG_KEYS, _DECLARED_TYPES
    )


def check_inputs(args: argparse.Namespace) -> None:
    """`cli.UsageError` unless both logs are given (or neither, to generate),
    every pattern matches a file (or, to follow, names a directory that
    exists), and the Bigtable flags come together."""
    if bool(args.bigtable_project) != bool(args.bigtable_instance):
        raise cli.UsageError("--bigtable_project and --bigtable_instance go together")
    if bool(args.queries) != bool(args.clicks):
        raise cli.UsageError("give both --queries and --clicks, or neither to generate")
    follow = getattr(args, "follow", False)
    if follow and not args.queries:
        raise cli.UsageError(
            "--follow needs --queries and --clicks: the logs to follow"
        )
    require = cli.require_directories if follow else cli.require_matches
    require("--queries", args.queries)
    require("--clicks", args.clicks)
    cli.require_formats("--queries", args.queries, args.input_format)
    cli.require_formats("--clicks", args.clicks, args.input_format)

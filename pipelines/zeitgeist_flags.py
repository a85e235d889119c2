"""The command line of `python -m pipelines.zeitgeist`: its flags, and the
config they override (`configs/zeitgeist.yaml`, then `--config`, then
`--set`, then the named flags)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pipelines import cli, live_flags
from pipelines import config as config_loader

DEFAULT_CONFIG = config_loader.CONFIG_DIR / "zeitgeist.yaml"


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = cli.Parser(
        prog="python -m pipelines.zeitgeist",
        description="Zeitgeist: spike and dip detection over search logs.",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        type=cli.file_pattern,
        help="file or glob of searches (.jsonl/.json/.ndjson, .csv, .parquet, "
        "optionally compressed: .gz, .bz2, ...); repeatable. Omit to generate "
        "a synthetic stream.",
    )
    parser.add_argument(
        "--input_format",
        choices=("jsonl", "csv", "parquet"),
        help="format of --input when the extension does not tell",
    )
    parser.add_argument("--output", required=True, help="output directory")
    config_loader.add_config_arguments(parser, DEFAULT_CONFIG)
    parser.add_argument("--window_seconds", type=int, help="window.size_seconds")
    parser.add_argument("--late_policy", choices=("drop", "correct"))
    parser.add_argument("--allowed_lateness_seconds", type=int)
    parser.add_argument("--threshold", type=float, help="detector.threshold")
    parser.add_argument("--seasonality", choices=("auto", "none", "daily", "weekly"))
    parser.add_argument("--seed", type=int, help="generator.seed")
    parser.add_argument("--num_queries", type=int, help="generator.num_queries")
    parser.add_argument("--days", type=float, help="generator.days")
    parser.add_argument(
        "--rate", type=float, help="generator.rate (searches/s, --streaming)"
    )
    parser.add_argument(
        "--live_minutes", type=float, help="generator.live_minutes (--streaming)"
    )
    parser.add_argument(
        "--model_store",
        choices=("none", "bigtable"),
        help="model_store.kind: where models outlive the run",
    )
    parser.add_argument("--bigtable_project", help="model_store.project")
    parser.add_argument("--bigtable_instance", help="model_store.instance")
    live_flags.add_live_arguments(
        parser,
        "run live on files that keep arriving in --input's directory, "
        "until stopped (implies --streaming)",
    )
    parser.add_argument("--write_window_counts", action="store_true")
    parser.add_argument("--write_scores", action="store_true")
    parser.add_argument(
        "--report",
        action="store_true",
        help="write OUTPUT/report.html with the strongest episodes and their plots",
    )
    return parser.parse_known_args(argv)


_FLAG_KEYS = {
    "window_seconds": "window.size_seconds",
    "late_policy": "window.late_policy",
    "allowed_lateness_seconds": "window.allowed_lateness_seconds",
    "threshold": "detector.threshold",
    "seasonality": "model.seasonality",
    "seed": "generator.seed",
    "num_queries": "generator.num_queries",
    "days": "generator.days",
    "rate": "generator.rate",
    "live_minutes": "generator.live_minutes",
    "model_store": "model_store.kind",
    "bigtable_project": "model_store.project",
    "bigtable_instance": "model_store.instance",
    **live_flags.FLAG_KEYS,
}
_FLOAT_KEYS = (
    "generator.days",
    "generator.rate",
    "generator.live_minutes",
    *live_flags.FLOAT_KEYS,
)


def load_config(args: argparse.Namespace) -> config_loader.Config:
    """configs/zeitgeist.yaml, then --config, then --set, then named flags."""
    return config_loader.from_command_line(
        DEFAULT_CONFIG, args, _FLAG_KEYS, dict.fromkeys(_FLOAT_KEYS, float)
    )

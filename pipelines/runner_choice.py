"""Which runner `--runner=SparkRunner` means in this project's pipelines.

Beam's own SparkRunner downloads a Java job server bundling Spark 3; ours runs
on PySpark 4 in Python. `--runner=SparkRunner` picks ours unless the user
points at a Java job server (`--job_endpoint` or `--spark_job_server_jar`),
which only Beam's runner can use. With no `--runner`, or with
`--runner=DirectRunner`, the job runs on Beam's DirectRunner without its
attempt to download and run Prism first (`runners.in_process`); Prism is
`--runner=PrismRunner`. Our runner's own options (`--spark_*`,
`--checkpoint_dir`) given to a job that runs on Beam's local runners are
ignored by them: a warning says so. A `--runner` that names no runner is
refused before anything runs, with the names it takes.
"""

import difflib
import importlib
import logging
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

_log = logging.getLogger("pipelines.runner_choice")
_JAVA_ONLY_FLAGS = ("--job_endpoint", "--spark_job_server_jar")
# The runners `--runner` takes by name: Beam's (its SparkRunner being ours).
_RUNNER_NAMES = tuple(StandardOptions.KNOWN_RUNNER_NAMES)
# Beam's local runners, by their canonical names (`_canonical`); they read
# none of our SparkRunner's options.
_BEAM_LOCAL_RUNNERS = ("directrunner", "bundlebaseddirectrunner", "fnapirunner")
# Names of Beam's DirectRunner that `runners.in_process` stands in for.
_SWITCHING_DIRECT_RUNNERS = ("directrunner", "switchingdirectrunner")
# Beam's DirectRunner and the runners it is made of or made into.
_BEAM_DIRECT_RUNNERS = (
    "directrunner",
    "switchingdirectrunner",
    "bundlebaseddirectrunner",
    "testdirectrunner",
)


def choose_runner(beam_args: Sequence[str]) -> tuple[PipelineRunner | None, list[str]]:
    """The runner to pass to `beam.Pipeline`, and the remaining Beam args.

    Returns (None, args) when Beam's own resolution should apply; raises
    `ValueError` for a `--runner` that names no runner (`check_runner`).
    """
    args = list(beam_args)
    name, rest = _pop_runner(args)
    if name is not None:
        check_runner(name)
    if name is None or _canonical(name) in _SWITCHING_DIRECT_RUNNERS:
        from runners.in_process import InProcessDirectRunner

        return InProcessDirectRunner(), rest
    if _canonical(name) != "sparkrunner":
        return None, args
    if any(a.split("=", 1)[0] in _JAVA_ONLY_FLAGS for a in rest):
        return None, args
    from runners.spark import SparkRunner

    return SparkRunner(), rest


def runs_on_beam(runner: PipelineRunner | None) -> bool:
    """Whether a runner `choose_runner` returned is one of Beam's (None:
    Beam resolves `--runner` itself) rather than this project's SparkRunner."""
    from runners.in_process import InProcessDirectRunner

    return runner is None or isinstance(runner, InProcessDirectRunner)


def is_beam_local(name: str | None) -> bool:
    """Whether `--runner` `name` (None: not given) is one of Beam's local
    runners, the DirectRunner being Beam's default."""
    return name is None or _canonical(name) in _BEAM_LOCAL_RUNNERS


def is_beam_direct(name: str | None) -> bool:
    """Whether `--runner` `name` (None: not given) is Beam's DirectRunner,
    which runs a streaming job on its bundle-based runner."""
    return name is None or _canonical(name) in _BEAM_DIRECT_RUNNERS


def check_runner(name: str) -> None:
    """Raises `ValueError` unless `--runner` `name` is a runner's name, or
    a runner class's module.ClassName that can be imported: Beam would
    refuse it only once the job is built, with a traceback."""
    if _canonical(name) in (known.lower() for known in _RUNNER_NAMES):
        return
    if "." in name:
        module, _, attribute = name.rpartition(".")
        try:
            getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"--runner {name}: {error}") from None
        return
    lowered = {known.lower(): known for known in _RUNNER_NAMES}
    close = difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.6)
    hint = f" (did you mean {lowered[close[0]]}?)" if close else ""
    raise ValueError(
        f"unknown runner {name!r}{hint}: --runner takes "
        f"{', '.join(_RUNNER_NAMES)}, or a runner class as module.ClassName"
    )


def _canonical(name: str) -> str:
    """`--runner` `name` as Beam looks it up: in lower case, "Runner" added
    if that makes it a runner's name (`spark` is SparkRunner)."""
    lowered = name.lower()
    known = {runner.lower() for runner in _RUNNER_NAMES}
    if lowered not in known and f"{lowered}runner" in known:
        return f"{lowered}runner"
    return lowered


def check_runner_options(beam_args: Sequence[str]) -> None:
    """Raises `ValueError` for an option of our SparkRunner it cannot run
    with (`runners.spark.options.check_options`), when `--runner` chooses
    it: it would otherwise fail once the job is built and Spark started."""
    runner, rest = choose_runner(beam_args)
    if not runs_on_beam(runner):
        from runners.spark.options import check_options

        check_options(PipelineOptions(rest))


def warn_of_ignored_spark_flags(beam_args: Sequence[str]) -> None:
    """Logs a warning naming our SparkRunner's options among `beam_args`
    when the job runs on one of Beam's local runners, which ignore them."""
    name, rest = _pop_runner(list(beam_args))
    if not is_beam_local(name):
        return
    ignored = sorted(
        {
            flag
            for flag in (arg.split("=", 1)[0] for arg in rest)
            if flag.startswith("--spark_") or flag == "--checkpoint_dir"
        }
    )
    if ignored:
        _log.warning(
            "%s: options of --runner=SparkRunner; this job runs on Beam's %s, "
            "which ignores them",
            ", ".join(ignored),
            name or "DirectRunner",
        )


def _pop_runner(args: list[str]) -> tuple[str | None, list[str]]:
    rest, name, skip = [], None, False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg.startswith("--runner="):
            name = arg.split("=", 1)[1]
        elif arg == "--runner" and i + 1 < len(args):
            name, skip = args[i + 1], True
        else:
            rest.append(arg)
    return name, rest

"""Which runner `--runner=SparkRunner` means in this project's pipelines.

Beam's own SparkRunner downloads a Java job server bundling Spark 3; ours runs
on PySpark 4 in Python. `--runner=SparkRunner` picks ours unless the user
points at a Java job server (`--job_endpoint` or `--spark_job_server_jar`),
which only Beam's runner can use.
"""

from collections.abc import Sequence

from apache_beam.runners.runner import PipelineRunner

_JAVA_ONLY_FLAGS = ("--job_endpoint", "--spark_job_server_jar")


def choose_runner(beam_args: Sequence[str]) -> tuple[PipelineRunner | None, list[str]]:
    """The runner to pass to `beam.Pipeline`, and the remaining Beam args.

    Returns (None, args) when Beam's own resolution should apply.
    """
    args = list(beam_args)
    name, rest = _pop_runner(args)
    if name is None or name.lower() not in ("sparkrunner", "spark"):
        return None, args
    if any(a.split("=", 1)[0] in _JAVA_ONLY_FLAGS for a in rest):
        return None, args
    from runners.spark import SparkRunner

    return SparkRunner(), rest


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

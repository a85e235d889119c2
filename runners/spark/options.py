"""Pipeline options of the PySpark runner.

``--spark_master_url`` is declared by Beam's own ``SparkRunnerOptions`` (for
its Java job server, default ``local[4]``); argparse forbids declaring it
twice, so this runner reads Beam's flag and applies its own default,
``local[*,4]``, when the flag was not given.
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions

# Every core, and a failed task tried up to 4 times, as Spark does on a
# cluster (plain ``local[*]`` never retries a task).
DEFAULT_MASTER = "local[*,4]"
# Key groups per stateful stage in streaming: the unit of state a task owns
# in a batch, so also the most tasks a stateful stage can use.
DEFAULT_KEY_GROUPS = 16
# Records a source may emit per micro-batch: a few seconds of work for a
# simple pipeline on two cores, so a backlog (a restart after an outage)
# is read over several batches that each commit.
DEFAULT_MAX_RECORDS = 100_000


class SparkOptions(PipelineOptions):
    """Options read by :class:`runners.spark.SparkRunner`."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--spark_conf",
            action="append",
            default=None,
            help="Extra Spark configuration as key=value; repeatable.",
        )
        parser.add_argument(
            "--spark_default_parallelism",
            type=int,
            default=None,
            help="Partitions of shuffles and keyed stages "
            "(default: the SparkContext's defaultParallelism).",
        )
        parser.add_argument(
            "--spark_bundle_bytes",
            type=int,
            default=8 << 20,
            help="Encoded input bytes per SDK bundle within a Spark partition.",
        )
        parser.add_argument(
            "--spark_progress_seconds",
            type=float,
            default=30.0,
            help="Log the running Spark stages' task counts this often (0: never).",
        )
        parser.add_argument(
            "--checkpoint_dir",
            default=None,
            help="Streaming: directory of the offset and commit logs and of "
            "keyed state; a restart on the same directory resumes the job "
            "(default: a fresh temporary directory, named in the log, deleted "
            "when the job finishes and kept after a stop or a failure).",
        )
        parser.add_argument(
            "--streaming_key_groups",
            type=int,
            default=DEFAULT_KEY_GROUPS,
            help="Streaming: key groups each stateful stage's keys hash to "
            "(fixed for the life of a checkpoint directory).",
        )
        parser.add_argument(
            "--streaming_idle_timeout_seconds",
            type=float,
            default=0.0,
            help="Streaming: once a source's watermark has stood still this "
            "long, it follows the processing time less this delay, so an idle "
            "source stops holding the pipeline (0: never; a replay of old "
            "data needs it off).",
        )
        parser.add_argument(
            "--streaming_max_records_per_batch",
            type=int,
            default=DEFAULT_MAX_RECORDS,
            help="Streaming: records a source (a splittable DoFn) may emit in "
            "one micro-batch before it is checkpointed and resumed in the next "
            "(0: no cap). Bounds a batch after a backlog, e.g. on restart.",
        )
        parser.add_argument(
            "--streaming_batch_interval_seconds",
            type=float,
            default=0.2,
            help="Streaming: minimum time from one micro-batch's start to the "
            "next (0: back to back).",
        )


def parse_spark_conf(pairs: list[str] | None) -> dict[str, str]:
    """Turns repeated ``key=value`` flags into a dict; rejects malformed ones,
    and a `spark.default.parallelism` below 1, which Spark takes and every
    shuffle of the job then has no partition to put elements in."""
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark_conf expects key=value, got {pair!r}")
        conf[key.strip()] = value.strip()
    parallelism = conf.get("spark.default.parallelism")
    if parallelism is not None and not (
        parallelism.isdigit() and int(parallelism) >= 1
    ):
        raise ValueError(
            "--spark_conf spark.default.parallelism must be a whole number "
            f">= 1, got {parallelism!r}"
        )
    return conf


def master_url(options: PipelineOptions) -> str:
    """The Spark master to use: ``--spark_master_url`` or ``local[*,4]``."""
    given = options.get_all_options(drop_default=True).get("spark_master_url")
    return given or DEFAULT_MASTER


# The masters PySpark 4 can start on, in the forms Spark's SparkContext
# parses (its LOCAL_*_REGEX, SPARK_REGEX; Spark 4 has no Mesos). Any other
# failed only once the JVM started: a Java trace for 'local[two]', the
# gateway gone ('JAVA_GATEWAY_EXITED') for a host:port without spark://.
_MASTER_FORMS = (
    "local, local[N], local[*], local[N,F], local[*,F], local-cluster[N,C,M], "
    "spark://HOST:PORT[,HOST:PORT...], yarn or k8s://URL"
)
_MASTER = re.compile(
    r"local(\[(\*|[1-9][0-9]*)(\s*,\s*[0-9]+)?\])?"
    r"|local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*\]"
    r"|spark://[^\s/,]+:[0-9]+(,[^\s/,]+:[0-9]+)*"
    r"|yarn"
    r"|k8s://\S+"
)


def check_master_url(url: str) -> None:
    """Raises ValueError unless ``url`` is a Spark master's URL."""
    if _MASTER.fullmatch(url):
        return
    # A standalone master's address without its scheme is the likely slip.
    bare = re.fullmatch(r"[^\s/:]+:[0-9]+", url)
    hint = f" (did you mean spark://{url}?)" if bare else ""
    raise ValueError(
        f"SparkRunner: --spark_master_url {url!r} is not a Spark master{hint}; "
        f"give {_MASTER_FORMS}"
    )


def file_in_the_way(path: Path) -> Path | None:
    """The file that stands where directory ``path`` is wanted: ``path``
    itself or one of its parents; None if there is none."""
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            return part
    return None


def _check_checkpoint_dir(path: str | None) -> None:
    """Raises ValueError if the checkpoint directory is a file or under one:
    the streaming job would fail to make it once Spark had started."""
    if not path:
        return
    found = file_in_the_way(Path(path))
    if found is not None:
        where = "" if found == Path(path) else f": {str(found)!r}"
        raise ValueError(
            f"SparkRunner: --checkpoint_dir {path!r}{where} is a file, not a directory"
        )


# Flags that look like this runner's: a misspelling of one must not leave
# the job running on defaults with only Beam's "Discarding unparseable args".
_OWN_PREFIXES = ("spark_", "streaming_", "checkpoint")


def check_options(options: PipelineOptions) -> None:
    """Raises ValueError for a SparkRunner option out of its range or of
    the wrong form (the master's URL, a ``--spark_conf`` without ``=``, a
    checkpoint directory that is a file), or an unknown flag that looks
    like one (with the closest known name). The pipeline commands call it
    as they parse their flags, the runner before it starts Spark."""
    known = options.get_all_options()
    given = options.get_all_options(retain_unknown_options=True)
    own = [name for name in known if name.startswith(_OWN_PREFIXES)]
    for name in given.keys() - known.keys():
        if name.startswith(_OWN_PREFIXES):
            close = difflib.get_close_matches(name, own, n=1)
            hint = f" (did you mean --{close[0]}?)" if close else ""
            raise ValueError(f"SparkRunner: unknown option --{name}{hint}")
    spark = options.view_as(SparkOptions)
    least = {
        "spark_bundle_bytes": 1,
        "spark_default_parallelism": 1,
        "streaming_key_groups": 1,
        "streaming_max_records_per_batch": 0,
        "spark_progress_seconds": 0,
        "streaming_idle_timeout_seconds": 0,
        "streaming_batch_interval_seconds": 0,
    }
    for name, low in least.items():
        value = getattr(spark, name)
        if value is None:
            continue
        # Through the job server, options arrive as the strings they were.
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and number >= low):
            raise ValueError(f"SparkRunner: --{name} must be >= {low}, got {value}")
    check_master_url(master_url(options))
    parse_spark_conf(spark.spark_conf)
    _check_checkpoint_dir(spark.checkpoint_dir)

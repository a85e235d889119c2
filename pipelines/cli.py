"""Strict command lines for the pipelines: every mistake is one line, exit 2.

A pipeline command takes its own flags and Beam's (`--runner`,
`--direct_num_workers`, the Spark runner's `--spark_*`, ...). argparse would
hand anything it does not know to Beam, and Beam only warns about flags it
does not know either, so a misspelled `--windw_seconds 60` used to run with
the default. Here a flag neither side knows is an error that names the
closest known flag, an input glob that matches no file is an error, and
each of these, like a bad config value, ends the command with one line on
stderr and exit status 2, never a traceback. A job that fails on purpose
(Bigtable unavailable past its deadline, a table gone) ends with one line
and status 1 (`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import pathlib
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import console
from pipelines.config import ConfigError
from pipelines.runner_choice import (
    check_runner_options,
    choose_runner,
    warn_of_ignored_spark_flags,
)
from runners.spark.options import file_in_the_way
from transforms.records.followed_files import followed_directory
from transforms.records.readers import FORMAT_SUFFIXES, infer_format

USAGE_ERROR_STATUS = 2
JOB_FAILED_STATUS = 1


# `--help` lists the command's own flags; Beam's are parsed after them.
BEAM_OPTIONS_HELP = (
    "Beam's pipeline options are taken too, among them --runner=SparkRunner "
    "(this project's runner on PySpark, with --spark_master_url URL, "
    "--spark_conf KEY=VALUE, --checkpoint_dir DIR and the rest of "
    "docs/spark-runner.md, 'Options'), --streaming, and --runner=PortableRunner "
    "--job_endpoint HOST:PORT for a job server."
)


class UsageError(ValueError):
    """A mistake on the command line; its message is one line for the user."""


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` for a pipeline command: it raises `UsageError`
    instead of printing usage, takes no abbreviated flags (`--window` is not
    `--window_seconds`), and `parse_known_args` leaves over only flags that
    Beam knows, with the options of the runner `--runner` chooses."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("epilog", BEAM_OPTIONS_HELP)
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace=None
    ) -> tuple[argparse.Namespace, list[str]]:
        """The command's flags and Beam's; `UsageError` for any other flag
        or a stray positional argument."""
        try:
            parsed, rest = super().parse_known_args(args, namespace)
        except UsageError:
            # argparse names a missing required flag before a flag it does
            # not know, and that flag mistyped (`--outptu`) is the likelier
            # mistake: the unknown one is named first.
            self._refuse_unknown(self._leftover_without_required(args, namespace))
            raise
        self._refuse_unknown(rest)
        with usage_errors():  # e.g. a Spark master URL of no known form
            check_runner_options(rest)
        warn_of_ignored_spark_flags(rest)
        return parsed, rest

    def _leftover_without_required(self, args, namespace) -> list[str]:
        required = [a for a in self._actions if a.required]
        for action in required:
            action.required = False
        try:
            return super().parse_known_args(args, namespace)[1]
        finally:
            for action in required:
                action.required = True

    def _refuse_unknown(self, beam_args: list[str]) -> None:
        with usage_errors():  # a --runner that names no runner
            choose_runner(beam_args)  # imports it, registering its options
        beam_parser = _beam_parser()
        _, unknown = beam_parser.parse_known_args(beam_args)
        if unknown:
            raise UsageError(_unknown_message(unknown[0], self, beam_parser))


def _beam_parser() -> argparse.ArgumentParser:
    """The parser Beam builds from every registered `PipelineOptions` class
    (a runner's own options register when its module is imported); its
    errors (`--runner` without a value) are `UsageError`s, not its usage
    block of every Beam flag."""
    captured: list[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=captured.append)
    beam_parser = captured[0]
    beam_parser.error = _refuse
    return beam_parser


def _refuse(message: str) -> NoReturn:
    raise UsageError(message)


def _unknown_message(
    arg: str, parser: argparse.ArgumentParser, beam_parser: argparse.ArgumentParser
) -> str:
    if not arg.startswith("-"):
        return f"unexpected argument {arg!r}"
    name = arg.split("=", 1)[0]
    close = _meant_flag(name, [_flags(parser), _flags(beam_parser)])
    hint = f" (did you mean {close}?)" if close else ""
    return f"unknown flag {name}{hint}"


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every long flag `parser` takes."""
    return [o for o in parser._option_string_actions if o.startswith("--")]


def _meant_flag(name: str, flag_sets: list[list[str]]) -> str | None:
    """The flag a user most likely meant by `name`: the shortest that it
    begins (`--checkpoint` for `--checkpoint_dir`), else the closest in
    spelling; each set asked in turn (the command's own before Beam's)."""
    for flags in flag_sets:
        begun = sorted((f for f in flags if f.startswith(name)), key=len)
        if begun:
            return begun[0]
    for flags in flag_sets:
        close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
        if close:
            return close[0]
    return None


def finite_float(text: str) -> float:
    """argparse's `type` for a number flag that sets no config key (those
    are checked with the config, `pipelines.config`): a finite float, as
    argparse's `float` would also take "nan" and "inf"."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def file_pattern(text: str) -> str:
    """argparse's `type` for an input file or glob: a bare glob such as
    `*.jsonl` made `./*.jsonl`, since Beam's match finds nothing for a glob
    whose directory part is empty. Other patterns stay as given: a followed
    directory's checkpoint knows its files by the paths they were matched
    under, and a resumed job must match them alike."""
    if os.path.dirname(text) or not any(c in text for c in "*?["):
        return text
    return os.path.join(os.curdir, text)


def require_matches(flag: str, patterns: Sequence[str]) -> None:
    """Raises `UsageError` if a file pattern given as `flag` names a
    directory or matches no file."""
    matched = {}
    for pattern in patterns:
        _refuse_directory(flag, pattern)
        matched[pattern] = _matched(flag, pattern)
        if not matched[pattern]:
            raise UsageError(f"{flag} {pattern!r} matches no file")
    _refuse_overlaps(flag, patterns, matched)


def _matched(flag: str, pattern: str) -> list[str]:
    """The paths of the files `pattern` matches now, sorted (a listing's
    order is the filesystem's, and an error naming two should not vary)."""
    try:
        found = FileSystems.match([pattern])[0].metadata_list
    except BeamIOError as error:
        raise UsageError(f"{flag} {pattern!r}: {error}") from None
    return sorted(metadata.path for metadata in found)


def _refuse_overlaps(
    flag: str, patterns: Sequence[str], matched: dict[str, list[str]]
) -> None:
    """Raises `UsageError` if a pattern is given twice as `flag`, or two
    match one file now (`matched`: each pattern's files): each pattern is
    read on its own, so the file's records would be read, and counted,
    twice."""
    for pattern in patterns:
        if patterns.count(pattern) > 1:
            raise UsageError(
                f"{flag} {pattern!r} is given twice: its files would be read twice"
            )
    # By the file each path leads to: "d/./a.jsonl", "d//a.jsonl" and a
    # symbolic link to "d/a.jsonl" all read that one file.
    matched_by: dict[str, tuple[str, str]] = {}
    for pattern in patterns:
        for path in matched[pattern]:
            first, first_path = matched_by.setdefault(_real_path(path), (pattern, path))
            if first != pattern:
                raise UsageError(
                    f"{flag} {first!r} and {pattern!r} both match {path!r}: "
                    "its records would be read twice; give patterns that "
                    "match apart"
                )
            if first_path != path:
                raise UsageError(
                    f"{flag} {pattern!r} matches {first_path!r} and {path!r}, "
                    "one file: its records would be read twice; give a "
                    "pattern that matches it once"
                )


def _real_path(path: str) -> str:
    """The file a local `path` leads to, links and "." resolved; any other
    filesystem's path as it is (an object store has no links)."""
    return path if "://" in path else os.path.realpath(path)


def refuse_unused(args: argparse.Namespace, flags: Sequence[str], why: str) -> None:
    """Raises `UsageError` if any of `flags` (argparse names, unset when
    None) was given: in this mode nothing reads them, and a flag ignored
    without a word lets a typo of intent change a run."""
    for name in flags:
        if getattr(args, name) is not None:
            raise UsageError(f"--{name} {why}")


def require_formats(
    flag: str, patterns: Sequence[str], input_format: str | None
) -> None:
    """Raises `UsageError` if, without `--input_format`, a pattern given as
    `flag` does not name its format (`logs/*` or `*.gz` does not)."""
    if input_format:
        return
    for pattern in patterns:
        try:
            infer_format(pattern)
        except ValueError:
            raise UsageError(
                f"{flag} {pattern!r} does not name its format: end it with "
                f"{', '.join(FORMAT_SUFFIXES)} (and a compression suffix such "
                "as .gz if any), or pass --input_format"
            ) from None


def require_directories(flag: str, patterns: Sequence[str]) -> None:
    """Raises `UsageError` if `flag` gives more than one pattern to follow,
    or a pattern in a local directory that does not exist (a followed
    pattern may match nothing yet, but a mistyped directory would be
    followed forever) or that names a directory."""
    if len(patterns) > 1:
        # Each pattern is a source of its own with its own watermark, and a
        # source that has read nothing yet holds the job's at the start of
        # time: no window would close until a file came for every one.
        raise UsageError(
            f"{flag} is given {len(patterns)} times: a followed {flag} is one "
            "pattern, one source with one watermark, and a pattern with no "
            "file yet would keep every window open; follow one directory's "
            "files of one format"
        )
    for pattern in patterns:
        _refuse_directory(flag, pattern)
        directory = followed_directory(pattern)
        if directory is not None and not os.path.isdir(directory):
            raise UsageError(f"{flag} {pattern!r}: no directory {directory!r}")
    matched = {pattern: _matched(flag, pattern) for pattern in patterns}
    _refuse_overlaps(flag, patterns, matched)


def output_directory(flag: str, value: str) -> pathlib.Path:
    """The directory given as `flag`, created if need be and written to
    once; `UsageError` if it is empty, a file, under a file, or cannot be
    created or written. Called before the job changes anything: a directory
    that cannot be written was otherwise found out by the sinks once the
    work was done, and by Photon's verifier after its Bigtable writes."""
    if not value.strip():
        # An unset shell variable: the current directory, whose earlier
        # outputs the sinks would replace.
        raise UsageError(f"{flag} is empty: give the directory to write to")
    path = pathlib.Path(value)
    found = file_in_the_way(path)
    if found is not None:
        where = "" if found == path else f": {str(found)!r}"
        raise UsageError(f"{flag} {value!r}{where} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"{flag} {value!r} cannot be created: {error.strerror}"
        ) from None
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError as error:
        raise UsageError(
            f"{flag} {value!r} cannot be written: {error.strerror}"
        ) from None
    return path


def _refuse_directory(flag: str, pattern: str) -> None:
    """A directory is no pattern of files: read, it is one dead letter ('Is
    a directory'); followed, it is watched forever for a change that never
    comes. The files in it are what was meant."""
    if "://" not in pattern and os.path.isdir(pattern):
        inside = os.path.join(pattern, "*.jsonl")
        raise UsageError(
            f"{flag} {pattern!r} is a directory: give a pattern of the files "
            f"in it, e.g. {inside!r}"
        )


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Turns a `ValueError` raised while a command sets its job up from the
    flags and config (a parameter's own rule, a file name without a known
    format) into a `UsageError`."""
    try:
        yield
    except ValueError as error:
        raise UsageError(str(error)) from None


# Errors a job fails with on purpose, with a message meant for the user.
_JOB_ERRORS = (
    "BigtableUnavailable",
    "TableGone",
    "GcHorizonTooShort",
    "LayoutMismatch",
    "CheckpointMismatch",
    "CheckpointInUse",
    "CheckpointUnusable",
    "StateAheadOfCheckpoint",
    "OutputUnwritable",
    "SparkDriverLost",
    "SparkJobAborted",
    "PipelineIdInUse",
)
_JOB_ERROR_LINE = re.compile(rf"\b({'|'.join(_JOB_ERRORS)}): (.+)")


def main(run: Callable[[], int], prog: str) -> NoReturn:
    """Runs a pipeline command and exits with its status.

    A `UsageError` or `ConfigError` is one line on stderr and status 2. A
    job that fails with one of the errors it raises on purpose (Bigtable
    unavailable past its deadline, a table gone, a registry or a checkpoint
    that does not fit the config, a checkpoint another job holds, or one
    whose files cannot be read or written, an output that cannot be
    written, Spark's driver JVM gone, a job Spark aborted, a
    Photon pipeline id another pipeline runs) is one line too, the error's
    own, and status 1; which runner wrapped it does not matter. Anything
    else is a bug: traceback.
    """
    console.configure_logging()
    try:
        status = run()
    except (UsageError, ConfigError) as error:
        _print_error(prog, str(error))
        status = USAGE_ERROR_STATUS
    except Exception as error:
        # Runners re-raise a worker's error wrapped, its text inside theirs.
        found = _JOB_ERROR_LINE.findall(str(error))
        if type(error).__name__ not in _JOB_ERRORS and not found:
            raise
        message = str(error) if not found else found[-1][1]
        _print_error(prog, f"job failed: {message}")
        status = JOB_FAILED_STATUS
    sys.exit(status)


def _print_error(prog: str, message: str) -> None:
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)

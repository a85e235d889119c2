"""A JSON Lines sink for bounded PCollections: several outputs, each in its
own files, named in one step when the input ends.

A batch job has a few outputs (anomalies, window counts, dead letters, ...).
A `WriteToText` each costs each of them Beam's whole write: a `Create`, an
initialising step, a shuffle of the written file names and two finalising
steps that read those names as side inputs. Those are stages and Spark jobs
whose cost does not depend on the data: at a million searches, the three
small outputs' writes added 0.4 to 0.8 s to a SparkRunner job of 2.4 s
(measured in process; see `docs/spark-runner.md`).
`WriteJsonLineFiles` keeps one step per output and one for them all:

- Each output's records are written where they are computed, in the stage
  that computes them: per bundle, one hidden temporary file, written in
  blocks of lines, under a folder beside the output named after the job.
- When every output is written, one step on all their file names (a side
  input) names each output's files `<path_prefix>-SSSSS-of-NNNNN.jsonl`, as
  `WriteToText` with `num_shards=0` would, gives an output that had no
  record one empty file, so that every output exists, and deletes the files
  an earlier job left under the same prefix and name pattern: a reader of
  `<prefix>*.jsonl` reads this job's records only.

A failed bundle's temporary file is never named: the naming step sees the
file names of the bundles that succeeded, and deletes the temporary folders.
Run again after it had moved some files, it finds them in place and
completes.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsList
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from transforms.records.readers import json_line

_LOGGER = logging.getLogger(__name__)
# Lines written to a file at once (about 2 MB of JSON at most).
LINES_PER_BLOCK = 10_000
SUFFIX = ".jsonl"
# The names under an output's prefix: this sink's shards, and the parts of
# `json_parts`, the streaming sink (shard and part numbers, `part_path`).
_SHARD_NAME = re.compile(r"-\d{5}-of-\d{5}" + re.escape(SUFFIX))
_PART_NAME = re.compile(r"-\d{3,}-\d{6,}" + re.escape(SUFFIX))


def part_path(path_prefix: str, shard: int, part: int) -> str:
    """Where the streaming sink writes part `part` of shard `shard`."""
    return f"{path_prefix}-{shard:03d}-{part:06d}{SUFFIX}"


# What a batch job whose output could not be written leaves to do.
_RUN_AGAIN = "the job's outputs are incomplete; run it again once this is fixed"


class OutputUnwritable(OSError):
    """An output file cannot be written (a full or read-only disk, no
    permission)."""


@contextlib.contextmanager
def naming_unwritable(path: str, remedy: str) -> Iterator[None]:
    """Turns an `OSError` in the block into `OutputUnwritable` naming
    `path`, with `remedy`: from a Spark task, "No space left on device"
    came as a traceback that named no file."""
    try:
        yield
    except OutputUnwritable:
        raise
    except OSError as error:
        raise OutputUnwritable(
            f"output file {path} cannot be written ({error}): {remedy}"
        ) from None


def shard_path(path_prefix: str, shard: int, shards: int) -> str:
    """Where shard `shard` of `shards` of an output is written."""
    return f"{path_prefix}-{shard:05d}-of-{shards:05d}{SUFFIX}"


def outputs_by_prefix(
    outputs: beam.PCollection | dict[str, beam.PCollection],
    path_prefix: str | None,
    sink: str,
) -> dict[str, beam.PCollection]:
    """What a JSON Lines sink (named `sink`) writes where: `outputs` as
    given (a dict by path prefix), or one PCollection under `path_prefix`."""
    if not isinstance(outputs, dict):
        if path_prefix is None:
            raise ValueError(f"{sink} of one PCollection needs path_prefix")
        outputs = {path_prefix: outputs}
    if not outputs:
        raise ValueError(f"{sink} needs at least one output")
    return outputs


def temporary_folder(path_prefix: str, job: str) -> str:
    """Where job `job` writes the temporary files of the output at
    `path_prefix`: a hidden folder beside its files."""
    directory, name = os.path.split(path_prefix)
    return FileSystems.join(directory or ".", f".{name}-temp-{job}")


class _BundleWriter(beam.DoFn):
    """One output's messages to one temporary file per bundle, as JSON
    lines; yields `(path_prefix, temporary path)` when the bundle ends."""

    def __init__(self, path_prefix: str, job: str) -> None:
        self._prefix = path_prefix
        self._folder = temporary_folder(path_prefix, job)
        self._lines: list[str] = []
        self._path: str | None = None
        self._file: BinaryIO | None = None

    def start_bundle(self) -> None:
        self._lines, self._path, self._file = [], None, None

    def process(self, message) -> None:
        self._lines.append(json_line(message))
        if len(self._lines) >= LINES_PER_BLOCK:
            self._write_block()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._lines:
            self._write_block()
        if self._file is None:
            return
        with naming_unwritable(self._path, _RUN_AGAIN):
            self._file.close()
        # The naming step reads every bundle's file in the global window,
        # whatever windows the records had.
        yield WindowedValue(
            (self._prefix, self._path),
            GlobalWindow().max_timestamp(),
            (GlobalWindow(),),
        )

    def _write_block(self) -> None:
        if self._file is None:
            self._path = FileSystems.join(self._folder, f"{uuid.uuid4().hex}{SUFFIX}")
        with naming_unwritable(self._path, _RUN_AGAIN):
            if self._file is None:
                self._file = FileSystems.create(self._path)
            self._file.write("\n".join(self._lines).encode("utf-8") + b"\n")
        self._lines = []


def name_files(
    path_prefixes: Iterable[str], job: str, written: Iterable[tuple[str, str]]
) -> list[str]:
    """Give job `job`'s temporary files (`written`: path prefix, temporary
    path) their final names, one empty file to an output without any, and
    delete what an earlier job left; return the final paths."""
    prefixes = list(path_prefixes)
    temporaries = collections.defaultdict(list)
    for prefix, path in written:
        temporaries[prefix].append(path)
    moves, empties = [], []
    for prefix in prefixes:
        paths = sorted(temporaries[prefix])
        if not paths:
            empties.append(shard_path(prefix, 0, 1))
        moves.extend(
            (path, shard_path(prefix, shard, len(paths)))
            for shard, path in enumerate(paths)
        )
    finals = [final for _, final in moves] + empties
    _delete_earlier(prefixes, set(finals))
    for temporary, final in moves:
        with naming_unwritable(final, _RUN_AGAIN):
            _move(temporary, final)
    for empty in empties:
        with naming_unwritable(empty, _RUN_AGAIN):
            FileSystems.create(empty).close()
    folders = [temporary_folder(prefix, job) for prefix in prefixes]
    FileSystems.delete([f for f in folders if FileSystems.exists(f)])
    return finals


def output_files(prefixes: list[str]) -> list[str]:
    """The files under `prefixes` named as outputs are: a batch job's
    shards and a streaming job's parts."""
    return [
        metadata.path
        for prefix, match in zip(
            prefixes,
            FileSystems.match([f"{prefix}-*{SUFFIX}" for prefix in prefixes]),
            strict=True,
        )
        for metadata in match.metadata_list
        if _SHARD_NAME.fullmatch(metadata.path.removeprefix(prefix))
        or _PART_NAME.fullmatch(metadata.path.removeprefix(prefix))
    ]


def _delete_earlier(prefixes: list[str], finals: set[str]) -> None:
    """Delete the files under `prefixes` that this job does not write: an
    earlier batch job's shards (one this job writes is replaced by the
    move), and the parts a streaming job wrote there, which a reader of the
    output would otherwise take for this job's lines."""
    earlier = [path for path in output_files(prefixes) if path not in finals]
    if earlier:
        _LOGGER.warning("Deleting %d files an earlier job wrote", len(earlier))
        FileSystems.delete(earlier)


def _move(temporary: str, final: str) -> None:
    if FileSystems.exists(temporary):
        FileSystems.rename([temporary], [final])
    elif not FileSystems.exists(final):
        # Neither there nor already moved by an earlier run of this step.
        raise OSError(f"written file {temporary} is missing; {final} not written")


class WriteJsonLineFiles(beam.PTransform):
    """Write bounded PCollections of messages as JSON Lines files.

    Apply it to one PCollection, with `path_prefix`, or to a dict of
    PCollections keyed by their path prefixes: all of them are then named
    in one step (see the module docstring). Each output's files are
    `<path_prefix>-SSSSS-of-NNNNN.jsonl`, one per bundle that had its
    records, or one empty file if it had none. The lines are `json_line`'s,
    as `WriteJsonLines` and `WriteJsonLineParts` write them. Returns the
    PCollection of the final file paths.
    """

    def __init__(self, path_prefix: str | None = None) -> None:
        super().__init__()
        self._prefix = path_prefix

    def expand(
        self, outputs: beam.PCollection | dict[str, beam.PCollection]
    ) -> beam.PCollection:
        outputs = outputs_by_prefix(outputs, self._prefix, "WriteJsonLineFiles")
        unbounded = [
            prefix for prefix, pcoll in outputs.items() if not pcoll.is_bounded
        ]
        if unbounded:
            # Its naming step waits for every bundle: an endless input has no
            # last one.
            raise ValueError(
                f"WriteJsonLineFiles writes bounded PCollections; {unbounded} "
                "are unbounded: write them with WriteJsonLineParts"
            )
        # Named at construction, so that every worker finds the same folders
        # without a side input read per record.
        job = uuid.uuid4().hex
        written = [
            pcoll
            | f"Write{i}"
            >> beam.ParDo(_BundleWriter(prefix, job)).with_output_types(tuple[str, str])
            for i, (prefix, pcoll) in enumerate(outputs.items())
        ]
        pipeline = next(iter(outputs.values())).pipeline
        return (
            pipeline
            | "Finish" >> beam.Impulse()
            | "NameFiles"
            >> beam.FlatMap(
                _name_files_once,
                tuple(outputs),
                job,
                AsList(written | "Written" >> beam.Flatten()),
            ).with_output_types(str)
        )


def _name_files_once(_impulse, prefixes, job, written) -> list[str]:
    return name_files(prefixes, job, written)

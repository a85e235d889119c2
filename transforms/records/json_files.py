"""A JSON Lines sink for bounded PCollections: several outputs, each in its
own files, written when the input ends through one sink.

A batch job has a few outputs (anomalies, window counts, dead letters, ...).
One `WriteToText` each costs each of them Beam's whole write: a `Create`, an
initialising step, a shuffle of the written file names and two finalising
steps that read them as side inputs. Those are stages and Spark jobs whose
cost does not depend on the data: at a million searches the three small
outputs cost more than the large one's lines (measured with
`benchmarks/runner_throughput.py`, see `docs/spark-runner.md`).
`WriteJsonLineFiles` sends every output through one `iobase.Write`:

- Each bundle writes, per output it saw, one hidden temporary file, in
  blocks of lines (the sink's steps then run per block, not per line).
- When every bundle is written, the finalising step names each output's
  files `<path_prefix>-SSSSS-of-NNNNN.jsonl`, as `WriteToText` would with
  `num_shards=0`, and gives an output that had no record one empty file, so
  that every output exists. Files of an earlier job under the same prefix
  and name pattern are deleted first: a reader of `<prefix>*.jsonl` then
  reads this job's records only.

A failed bundle's temporary file is never named: Beam hands the finalising
step the results of the bundles that succeeded, and the temporary folders
are deleted at the end. A finalising step run again after a partial rename
finds its files already in place and completes.
"""

from __future__ import annotations

import collections
import logging
import os
import uuid
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.io import iobase
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from transforms.records.readers import json_line

_LOGGER = logging.getLogger(__name__)
# Lines written as one block (about 2 MB of JSON at most).
LINES_PER_BLOCK = 10_000
SUFFIX = ".jsonl"


def shard_path(path_prefix: str, shard: int, shards: int) -> str:
    """Where shard `shard` of `shards` of an output is written."""
    return f"{path_prefix}-{shard:05d}-of-{shards:05d}{SUFFIX}"


class _JsonBlocks(beam.DoFn):
    """Messages to `(path_prefix, block)`: a block is up to
    `LINES_PER_BLOCK` JSON lines joined by newlines, in the bundle's order."""

    def __init__(self, path_prefix: str) -> None:
        self._prefix = path_prefix
        self._lines: list[str] = []

    def start_bundle(self) -> None:
        self._lines = []

    def process(self, message) -> Iterator[tuple[str, str]]:
        self._lines.append(json_line(message))
        if len(self._lines) >= LINES_PER_BLOCK:
            yield self._block()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        # The sink writes in the global window whatever the records' windows
        # were, so the last block of a bundle goes there.
        if self._lines:
            yield WindowedValue(
                self._block(), GlobalWindow().max_timestamp(), (GlobalWindow(),)
            )

    def _block(self) -> tuple[str, str]:
        block = "\n".join(self._lines)
        self._lines = []
        return self._prefix, block


class _JsonLineFilesWriter(iobase.Writer):
    """One bundle's temporary files, one per output it writes to, opened
    when its first block arrives."""

    def __init__(self, temporary_folders: dict[str, str], uid: str) -> None:
        self._folders = temporary_folders
        self._uid = uid
        self._files: dict[str, tuple[str, object]] = {}

    def write(self, value: tuple[str, str]) -> None:
        prefix, block = value
        opened = self._files.get(prefix)
        if opened is None:
            path = FileSystems.join(self._folders[prefix], f"{self._uid}{SUFFIX}")
            opened = self._files[prefix] = (path, FileSystems.create(path))
        opened[1].write(block.encode("utf-8") + b"\n")

    def close(self) -> tuple[tuple[str, str], ...]:
        """The (path prefix, temporary path) of each file written."""
        for _, handle in self._files.values():
            handle.close()
        return tuple((prefix, path) for prefix, (path, _) in self._files.items())


class _JsonLineFilesSink(iobase.Sink):
    """The sink of `WriteJsonLineFiles`: its writes and its finalising step."""

    def __init__(self, path_prefixes: Iterable[str]) -> None:
        self._prefixes = tuple(path_prefixes)

    def initialize_write(self) -> dict[str, str]:
        """A hidden temporary folder per output, beside its files."""
        run = uuid.uuid4().hex
        folders = {}
        for prefix in self._prefixes:
            directory, name = os.path.split(prefix)
            folder = FileSystems.join(directory or ".", f".{name}-temp-{run}")
            FileSystems.mkdirs(folder)
            folders[prefix] = folder
        return folders

    def open_writer(self, init_result: dict[str, str], uid: str):
        return _JsonLineFilesWriter(init_result, uid)

    def pre_finalize(self, init_result, writer_results) -> None:
        """Delete the files an earlier job left under these prefixes."""
        patterns = [f"{prefix}-?????-of-?????{SUFFIX}" for prefix in self._prefixes]
        stale = [
            metadata.path
            for match in FileSystems.match(patterns)
            for metadata in match.metadata_list
        ]
        if stale:
            _LOGGER.warning("Deleting %d files of an earlier job", len(stale))
            FileSystems.delete(stale)

    def finalize_write(
        self, init_result: dict[str, str], writer_results, pre_finalize_result
    ) -> list[str]:
        """Name every output's temporary files; return the final paths."""
        written = collections.defaultdict(list)
        for result in writer_results:
            for prefix, path in result:
                written[prefix].append(path)
        finals = []
        for prefix in self._prefixes:
            temporaries = sorted(written[prefix])
            if not temporaries:
                finals.append(shard_path(prefix, 0, 1))
                _create_empty(finals[-1])
            for shard, temporary in enumerate(temporaries):
                finals.append(shard_path(prefix, shard, len(temporaries)))
                _move(temporary, finals[-1])
        FileSystems.delete([f for f in init_result.values() if FileSystems.exists(f)])
        return finals


def _move(temporary: str, final: str) -> None:
    if FileSystems.exists(temporary):
        FileSystems.rename([temporary], [final])
    elif not FileSystems.exists(final):
        # Neither there nor already moved by an earlier attempt of this step.
        raise OSError(f"written file {temporary} is missing; {final} not written")


def _create_empty(path: str) -> None:
    FileSystems.create(path).close()


class WriteJsonLineFiles(beam.PTransform):
    """Write bounded PCollections of messages as JSON Lines files.

    Apply it to a dict of PCollections keyed by their path prefixes: all of
    them go through one sink (see the module docstring), and each output's
    files are `<path_prefix>-SSSSS-of-NNNNN.jsonl`, one per bundle that had
    its records, or one empty file if it had none. The lines are
    `json_line`'s, as `WriteJsonLines` and `WriteJsonLineParts` write them.
    Returns the PCollection of the final file paths.
    """

    def expand(self, outputs: dict[str, beam.PCollection]) -> beam.PCollection:
        if not outputs:
            raise ValueError("WriteJsonLineFiles needs at least one output")
        blocks = [
            pcoll
            | f"ToJson{i}"
            >> beam.ParDo(_JsonBlocks(prefix)).with_output_types(tuple[str, str])
            for i, (prefix, pcoll) in enumerate(outputs.items())
        ]
        return (
            blocks
            | "Merge" >> beam.Flatten()
            | "Write" >> iobase.Write(_JsonLineFilesSink(outputs))
        )

"""Parquet files read one row group at a time, so one file feeds many workers.

Text files are read whole (exact line numbers and a per-file CSV header need
that), but a Parquet file's footer says where every row group starts, so its
row groups can be read independently and still locate each bad row exactly.
`SplitRowGroups` lists a file's row groups as `ParquetPart`s; after a
reshuffle spreads them over workers, `ReadParquetPart` reads each one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.records.dead_letters import UNREADABLE_FILE, Parser, Rejected, counter
from transforms.records.file_reader import FileReader
from transforms.records.special_files import refuse_special

_MIME = "application/octet-stream"
# Parquet compresses inside the file; a ".gz" name must not be inflated.
_UNCOMPRESSED = CompressionTypes.UNCOMPRESSED


class ParquetPart(NamedTuple):
    """One row group of a Parquet file; `row_group` None means the whole file,
    whose rows are not known (`rows` None)."""

    path: str
    row_group: int | None
    first_row: int
    rows: int | None = None


class SplitRowGroups(beam.DoFn):
    """Emits a `ParquetPart` per row group of each matched Parquet file."""

    def process(self, readable_file: fileio.ReadableFile) -> Iterator[ParquetPart]:
        path = readable_file.metadata.path
        try:
            refuse_special(path)
            # As `ReadParquetPart` reads it: a Parquet file named ".gz" is
            # not inflated (gzip is not seekable), and is reported unreadable.
            with FileSystems.open(path, _MIME, _UNCOMPRESSED) as fh:
                metadata = pq.ParquetFile(fh).metadata
        except (OSError, pa.ArrowException):
            # Left whole, so that reading it reports why it is unreadable.
            yield ParquetPart(path, None, 0)
            return
        first_row = 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            yield ParquetPart(path, group, first_row, rows)
            first_row += rows


class ReadParquetPart(beam.DoFn):
    """Reads one `ParquetPart` into records and dead letters ("row N")."""

    def __init__(self, parser: Parser, record_type: str) -> None:
        self._parser = parser
        self._record_type = record_type

    def process(self, part: ParquetPart) -> Iterator[Any]:
        # Lines are never split here, so the line limit does not apply.
        reader = FileReader(self._parser, self._record_type, 1, part.path)
        try:
            refuse_special(part.path)
            with FileSystems.open(part.path, _MIME, _UNCOMPRESSED) as fh:
                yield from self.read_row_group(reader, fh, part)
        except (OSError, pa.ArrowException) as e:
            reason = f"{_unread(part, reader.done)}: {e}{_hint(part.path)}"
            yield reader.dead(Rejected(UNREADABLE_FILE, reason), b"", reader.done + 1)
            if part.rows is not None:
                # One dead letter stands for them all; the metric says how many.
                counter("rows_unreadable").inc(part.first_row + part.rows - reader.done)
        counter("records_read").inc(reader.records_read)

    def read_row_group(
        self, reader: FileReader, fh: BinaryIO, part: ParquetPart
    ) -> Iterator[Any]:
        """The outputs of `part`'s rows, read from `fh` one row at a time."""
        return reader.read_parquet_row_group(fh, part.row_group, part.first_row)


def _unread(part: ParquetPart, done: int) -> str:
    """What of `part` could not be read, `done` rows of the file being read."""
    if part.rows is None:
        return "unreadable file"
    last = part.first_row + part.rows
    return (
        f"unreadable file: row group {part.row_group + 1} (rows {done + 1} to "
        f"{last}, {last - done} rows) cannot be read"
    )


def _hint(path: str) -> str:
    """Why a Parquet file named as compressed cannot be read."""
    if CompressionTypes.detect_compression_type(path) == _UNCOMPRESSED:
        return ""
    return (
        " (Parquet compresses inside the file: a Parquet file compressed whole "
        "cannot be read, decompress it)"
    )

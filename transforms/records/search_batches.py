"""Searches read and validated in Arrow, a record batch at a time.

`ReadSearchQueries` turns every row into a Python dict and then into a
`SearchQuery`, one row at a time. `ReadSearchBatches` reads the same files
into Arrow tables of validated searches (`SEARCH_SCHEMA`): `screen` checks
`parse_search_query`'s rules over whole columns, and only the rows it cannot
clear (a float count, a time given as text, a blank query, a value Python
cannot hold, ...) are judged one by one by the per-row reader. So the valid
searches, and the dead letters with their reasons and row numbers, are
exactly those of `ReadSearchQueries`; only the cost differs. Parquet files
are read per row group, a record batch at a time (here); CSV and JSON Lines
files whole, a block of lines at a time (`text_batches`).

The tables are plain elements, not the batches of Beam's batched DoFns: a
DoFn that yields batches (`DoFn.yields_batches`) cannot also yield tagged
outputs in Beam 2.77 (every output is sized as a batch), and the reader must
yield dead letters beside its searches. The tables stay inside the fused
stage that reads them, so they are never encoded; `ZeitgeistOnBatches`
counts them per (query, window) there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.records import parquet_rows
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.dead_letters import DEAD_LETTERS, RECORDS
from transforms.records.file_reader import FileReader
from transforms.records.parquet_parts import ParquetPart, ReadParquetPart
from transforms.records.parse import parse_search_query
from transforms.records.readers import (
    DEFAULT_MAX_LINE_BYTES,
    MatchedFiles,
    MatchedParquetParts,
    line_limit,
    record_format,
)
from transforms.records.search_screen import screen, with_rescued
from transforms.records.text_batches import ReadSearchTextFile
from transforms.records.zeitgeist_pb2 import SearchQuery

_RECORD_TYPE = SearchQuery.DESCRIPTOR.name


class ReadSearchBatchPart(ReadParquetPart):
    """Reads one `ParquetPart` into tables of searches and dead letters."""

    def __init__(self) -> None:
        super().__init__(parse_search_query, _RECORD_TYPE)

    def read_row_group(
        self, reader: FileReader, fh: BinaryIO, part: ParquetPart
    ) -> Iterator[Any]:
        reader.start_parquet(part.first_row)
        groups = None if part.row_group is None else [part.row_group]
        for batch in pq.ParquetFile(fh).iter_batches(row_groups=groups):
            yield from _read_batch(reader, batch)


def _read_batch(reader: FileReader, batch: pa.RecordBatch) -> Iterator[Any]:
    """One record batch as a table of its valid searches and dead letters."""
    screened = screen(batch)
    first = reader.done
    reader.records_read += screened.searches.num_rows
    reader.done = first + batch.num_rows
    suspects = screened.suspects
    numbers = (first + 1 + suspects).tolist()
    judged = parquet_rows.rows(batch.take(suspects))
    verdicts = (
        reader.parquet_record(row, unconvertible, number)
        for number, (row, unconvertible) in zip(numbers, judged, strict=True)
    )
    return with_rescued(screened.searches, verdicts)


class ReadSearchBatches(beam.PTransform):
    """Read files of searches as Arrow tables (`SEARCH_SCHEMA`).

    The columnar counterpart of `ReadSearchQueries`, for the same formats
    (Parquet, CSV and JSON Lines, compressed or not) and with the same valid
    searches, dead letters and counters. Returns a `DoOutputsTuple`:
    `pa.Table`s of valid searches under `RECORDS` (one per record batch, or
    block of text lines, holding its valid rows), `DeadLetter`s under
    `DEAD_LETTERS`. Feed the tables to `ZeitgeistOnBatches`.

    Example::

        read = pipeline | ReadSearchBatches("logs/*.parquet")
        outputs = read[RECORDS] | ZeitgeistOnBatches(WindowParams(60_000))
    """

    def __init__(
        self,
        file_pattern: str,
        format: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        super().__init__()
        self._format = record_format(file_pattern, format)
        self._max_line_bytes = line_limit(max_line_bytes)
        self._file_pattern = file_pattern

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        if self._format == "parquet":
            parts = pbegin | "Parts" >> MatchedParquetParts(self._file_pattern)
            read: beam.DoFn = ReadSearchBatchPart()
        else:
            parts = pbegin | "Files" >> MatchedFiles(self._file_pattern)
            read = ReadSearchTextFile(self._format, self._max_line_bytes)
        return parts | "Read" >> beam.ParDo(read).with_output_types(
            pa.Table, **{DEAD_LETTERS: DeadLetter}
        ).with_outputs(DEAD_LETTERS, main=RECORDS)

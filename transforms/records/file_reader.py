"""Read one record file (JSON Lines, CSV or Parquet) into outputs.

`FileReader` reads a whole file sequentially, which is what makes exact line
numbers and a per-file CSV header possible. It yields valid messages and
tagged dead letters, and keeps the file's counts for the caller to report.
"""

from __future__ import annotations

import csv
from collections.abc import Generator, Iterator
from typing import Any, BinaryIO

import pyarrow.parquet as pq

from transforms.records import parquet_rows
from transforms.records.dead_letters import (
    CSV_COLUMNS,
    CSV_HEADER,
    INVALID_CSV,
    OVERSIZED,
    Parser,
    Rejected,
    dead_letter,
    decode,
    parse_json,
    parse_row,
    row_raw,
)
from transforms.records.lines import (
    RAW_LIMIT_BYTES,
    csv_fields,
    quote_left_open,
    split_lines,
)
from transforms.records.parse import required_fields

FORMATS = ("jsonl", "csv", "parquet")

# A CSV file's column names, or why its rows cannot be read (`csv_header`).
CsvHeader = list[str] | Rejected


class FileReader:
    """Reads one file's records; holds that file's counts and position.

    `read(fmt, fh)` yields messages and `DEAD_LETTERS`-tagged `DeadLetter`s
    located as "line N" (text) or "row N" (Parquet), counting from 1. Blank
    lines are skipped and counted in `blank_lines`; a CSV file's header is
    its first non-blank line.
    """

    def __init__(
        self, parser: Parser, record_type: str, max_line_bytes: int, source: str
    ) -> None:
        self.parser = parser
        self.record_type = record_type
        self.max_line_bytes = max_line_bytes
        self.source = source
        self.records_read = 0
        self.blank_lines = 0
        self.unit = "line"
        self.done = 0  # lines (or rows) read so far, to locate errors mid-file
        # The CSV row that left a quoted field open, while the lines that
        # continue it are read (`quote_opened_after`).
        self.quote_opened_on: int | None = None

    def read(self, fmt: str, fh: BinaryIO) -> Iterator[Any]:
        """Outputs for the file open as `fh`, in format `fmt` (of `FORMATS`)."""
        return getattr(self, "_read_" + fmt)(fh)

    def dead(self, rejected: Rejected, raw: bytes, number: int) -> Any:
        """A dead letter for line (or row) `number` of this file."""
        location = f"{self.unit} {number}"
        return dead_letter(rejected, raw, self.source, location, self.record_type)

    def lines(self, fh: BinaryIO) -> Iterator[tuple[int, bytes, int]]:
        """`split_lines` of `fh` without its blank lines, which it counts;
        `done` follows the lines read."""
        for line_no, line, length in split_lines(fh, self.max_line_bytes):
            self.done = line_no
            if not line or line.isspace():
                self.blank_lines += 1
            else:
                yield line_no, line, length

    def _text(self, line: bytes, length: int) -> str:
        if length > self.max_line_bytes:
            raise Rejected(
                OVERSIZED,
                f"line is {length} bytes, over the limit of {self.max_line_bytes} "
                f"bytes; raw form truncated to {RAW_LIMIT_BYTES} bytes",
            )
        return decode(line)

    def _read_jsonl(self, fh: BinaryIO) -> Iterator[Any]:
        for line_no, line, length in self.lines(fh):
            yield self.jsonl_record(line, length, line_no)

    def jsonl_record(self, line: bytes, length: int, line_no: int) -> Any:
        """The message of one JSON line, or its dead letter as "line `line_no`"."""
        try:
            message = parse_json(self.parser, self._text(line, length))
        except Rejected as rejected:
            return self.dead(rejected, line, line_no)
        self.records_read += 1
        return message

    def _read_csv(self, fh: BinaryIO) -> Iterator[Any]:
        lines = self.lines(fh)
        header = yield from self.csv_header(lines)
        for line_no, line, length in lines:
            yield self.csv_record(header, line, length, line_no)

    def csv_header(
        self, lines: Iterator[tuple[int, bytes, int]]
    ) -> Generator[Any, None, CsvHeader]:
        """Takes the header, the first of `lines`, and returns its column
        names, or, if it is unusable, why every later row is rejected
        (yielding the header's own dead letter)."""
        for line_no, line, length in lines:  # the first non-blank line only
            try:
                fields = self._csv_fields(line, length)
                return _csv_header(fields, required_fields(self.parser))
            except Rejected as rejected:
                bad = Rejected(CSV_HEADER, f"bad CSV header: {rejected.reason}")
                yield self.dead(bad, line, line_no)
                # Without its columns, or the required ones, no later row
                # can be read either.
                return Rejected(
                    CSV_HEADER, f"no usable CSV header: line {line_no} was rejected"
                )
        return []  # no line, so no row either

    def csv_record(
        self, header: CsvHeader, line: bytes, length: int, line_no: int
    ) -> Any:
        """The message of one CSV row under `header` (`csv_header`'s), or its
        dead letter as "line `line_no`"."""
        try:
            if isinstance(header, Rejected):
                raise header
            fields = self._row_fields(line, length, line_no)
            if len(fields) != len(header):
                raise Rejected(
                    CSV_COLUMNS,
                    f"CSV row has {len(fields)} columns, the header has {len(header)}",
                )
            message = parse_row(self.parser, dict(zip(header, fields, strict=True)))
        except Rejected as rejected:
            return self.dead(rejected, line, line_no)
        self.records_read += 1
        return message

    def _row_fields(self, line: bytes, length: int, line_no: int) -> list[str]:
        """The fields of CSV row `line_no`. A row that leaves a quoted field
        open is rejected, and so is each line after it up to the one that
        closes the field (`quote_opened_after`), with a reason naming it."""
        opened_on = self.quote_opened_on
        if opened_on is not None:
            self.quote_opened_on = self.quote_opened_after(
                opened_on, line_no, line, length
            )
            raise Rejected(
                INVALID_CSV,
                f"invalid CSV: continues the quoted field left open on line "
                f"{opened_on} (quoted fields may not hold line breaks)",
            )
        try:
            return self._csv_fields(line, length)
        except Rejected:
            # Only a row that cannot be read can leave a quoted field open.
            self.quote_opened_on = self.quote_opened_after(None, line_no, line, length)
            raise

    def quote_opened_after(
        self, opened_on: int | None, line_no: int, line: bytes, length: int
    ) -> int | None:
        """The row whose quoted field is open after CSV line `line_no`, if
        one is: `opened_on` is the one open before it (None if none was).

        A CSV parser that allowed line breaks in quoted fields would read
        the lines after a row that leaves one open into that field, up to
        the line that closes it: they are all one record, and none of them
        a row of its own. An oversized line, whose text is not kept, is
        taken to leave the field as it found it.
        """
        if length > self.max_line_bytes:
            return opened_on
        # Bytes that are not UTF-8 stand for themselves: the quoting turns
        # on ASCII quotes, commas and returns alone.
        text = line.decode("utf-8", "surrogateescape")
        if not quote_left_open(text, in_quote=opened_on is not None):
            return None
        return line_no if opened_on is None else opened_on

    def _csv_fields(self, line: bytes, length: int) -> list[str]:
        try:
            return csv_fields(self._text(line, length))
        except csv.Error as e:
            raise Rejected(INVALID_CSV, f"invalid CSV: {e}") from None

    def _read_parquet(self, fh: BinaryIO) -> Iterator[Any]:
        return self.read_parquet_row_group(fh, None, 0)

    def read_parquet_row_group(
        self, fh: BinaryIO, row_group: int | None, first_row: int
    ) -> Iterator[Any]:
        """Outputs for one row group of the Parquet file `fh` (all if None).

        `first_row` is the number of rows before the group, so that dead
        letters keep the row's position in the whole file.
        """
        self.start_parquet(first_row)
        groups = None if row_group is None else [row_group]
        for batch in pq.ParquetFile(fh).iter_batches(row_groups=groups):
            for row, unconvertible in parquet_rows.rows(batch):
                self.done += 1
                yield self.parquet_record(row, unconvertible, self.done)

    def start_parquet(self, first_row: int) -> None:
        """Number the rows that follow from `first_row` + 1, as "row N"."""
        self.unit = "row"
        self.done = first_row

    def parquet_record(
        self, row: parquet_rows.Row, unconvertible: Rejected | None, number: int
    ) -> Any:
        """The message of one Parquet row, or its dead letter as "row `number`"."""
        try:
            if unconvertible is not None:
                raise unconvertible
            message = parse_row(self.parser, row)
        except Rejected as rejected:
            return self.dead(rejected, row_raw(row), number)
        self.records_read += 1
        return message


def _csv_header(fields: list[str], required: tuple[str, ...]) -> list[str]:
    """The column names of a header line's `fields`, which must name each
    of the `required` fields once."""
    header = [name.strip() for name in fields]
    for name in header:
        if header.count(name) > 1:
            raise Rejected(CSV_HEADER, f"CSV header repeats column {name!r}")
    # A file without a header (or with one of other names) would otherwise
    # lose its first row, taken for the header, and reject every other row
    # for a missing field.
    missing = [name for name in required if name not in header]
    if missing:
        names = ", ".join(map(repr, missing))
        raise Rejected(
            CSV_HEADER,
            f"CSV header lacks the required column(s) {names}: is the header missing?",
        )
    return header

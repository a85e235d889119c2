"""Split binary streams into lines, bounded in memory, and CSV lines into fields.

Used by the file readers. A line longer than the limit is consumed without
being held in memory: only its first `RAW_LIMIT_BYTES` are kept, so that a
corrupt file with no newlines cannot exhaust a worker.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import BinaryIO

RAW_LIMIT_BYTES = 4096
CHUNK_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"


def split_lines(fh: BinaryIO, max_line_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """Yield `(line_number, line, length)` for each line of `fh`.

    Line numbers start at 1. `line` has no line terminator ("\\n" or
    "\\r\\n"), and a UTF-8 byte-order mark at the start of the stream is
    dropped. `length` is the line's full length in bytes; when it exceeds
    `max_line_bytes`, `line` holds only its first `RAW_LIMIT_BYTES`. A final
    line without a terminator is still a line; an empty stream has none.
    """
    line_no = 0
    head = b""  # start of a line continuing into the next chunk
    length = 0  # full length of that line so far
    first = True
    while chunk := fh.read(CHUNK_BYTES):
        if first:
            chunk = chunk.removeprefix(_BOM)
            first = False
        *complete, tail = chunk.split(b"\n")
        for part in complete:
            line_no += 1
            if length:  # ends a line begun in an earlier chunk
                size = length + len(part)
                part = _append(head, length, part, max_line_bytes)
                head, length = b"", 0
            else:
                size = len(part)
                if size > max_line_bytes:
                    part = part[:RAW_LIMIT_BYTES]
            yield line_no, part.removesuffix(b"\r"), size
        if tail:
            head = _append(head, length, tail, max_line_bytes)
            length += len(tail)
    if length:
        line_no += 1
        yield line_no, head.removesuffix(b"\r"), length


def _append(head: bytes, length: int, more: bytes, max_line_bytes: int) -> bytes:
    """Extend a line's kept head, keeping only the raw prefix once it is
    known to be oversized."""
    if length + len(more) <= max_line_bytes:
        return head + more
    return (head + more[:RAW_LIMIT_BYTES])[:RAW_LIMIT_BYTES]


class QuoteLeftOpen(csv.Error):
    """A CSV line that ends inside a quoted field (one holding a line break)."""


def csv_fields(text: str) -> list[str]:
    """The fields of one CSV line (Excel dialect); raises `csv.Error`, and
    `QuoteLeftOpen` if a quoted field is still open at the line's end:
    quoted fields may not hold line breaks.

    Lines without quotes take a fast path that splits on commas, which is
    exactly what the csv module does for them.
    """
    if '"' not in text:
        return text.split(",")
    # The csv module reads on into the next line while a quoted field is
    # open; that it asked for the empty line after `text` is what says so.
    reader = csv.reader((text, ""), strict=True)
    try:
        return next(reader)
    except csv.Error:
        if reader.line_num > 1:
            raise QuoteLeftOpen(
                "a quoted field is still open at the end of the line "
                "(quoted fields may not hold line breaks)"
            ) from None
        raise


def quote_left_open(text: str, in_quote: bool = False) -> bool:
    """Whether a quoted field is open at the end of the CSV line `text`,
    which begins inside one if `in_quote` (an earlier line left it open).

    A line that `csv_fields` refuses for another reason ends its record: a
    strict parser gives up on the record there and starts afresh on the
    next line.
    """
    try:
        # Inside a quoted field, the line reads as it would after the
        # field's opening quote.
        csv_fields('"' + text if in_quote else text)
    except QuoteLeftOpen:
        return True
    except csv.Error:
        pass
    return False

"""Split binary streams into blocks of lines held as columns.

The columnar counterpart of `FileReader.lines` (and so of `split_lines`),
for readers that judge a block of lines at once: the same lines, numbers,
full lengths and counts, with the same handling of blank lines, the
byte-order mark, "\\r\\n" and oversized lines. The stream is read in the same
chunks as `split_lines` reads it; line ends are found with numpy and each
chunk's lines become an Arrow binary array over the chunk's bytes, so no
Python runs per line.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from transforms.records import lines as line_splitting
from transforms.records.file_reader import FileReader
from transforms.records.lines import RAW_LIMIT_BYTES

_NEWLINE = ord("\n")
_RETURN = ord("\r")
# The bytes `bytes.isspace` is true of, by byte value.
_SPACE = np.array([bytes([b]).isspace() for b in range(256)])


@dataclass(frozen=True)
class LineBlock:
    """Consecutive non-blank lines of a stream, as `FileReader.lines` gives them."""

    numbers: np.ndarray  # line numbers (int64), from 1, blank lines counted
    lines: pa.LargeBinaryArray  # no terminator; only the raw prefix if oversized
    lengths: np.ndarray  # full lengths in bytes (int64), a final "\r" included

    def __len__(self) -> int:
        return len(self.numbers)

    def lines_at(self, indices: np.ndarray) -> Iterator[tuple[int, bytes, int]]:
        """The lines at `indices`, as `FileReader.lines` yields them; taken
        together, since Arrow's per-item access costs microseconds a line."""
        return zip(
            self.numbers[indices].tolist(),
            self.lines.take(pa.array(indices, pa.int64())).to_pylist(),
            self.lengths[indices].tolist(),
            strict=True,
        )

    def sliced(self, start: int, stop: int | None = None) -> LineBlock:
        """Lines `start` to `stop` of the block, without copying them."""
        stop = len(self) if stop is None else min(stop, len(self))
        return LineBlock(
            self.numbers[start:stop],
            self.lines[start:stop],
            self.lengths[start:stop],
        )


def line_blocks(
    reader: FileReader, fh: BinaryIO, max_lines: int, max_bytes: int
) -> Iterator[LineBlock]:
    """The lines `reader.lines(fh)` would yield, in blocks of at most
    `max_lines` lines and about `max_bytes` bytes.

    As there, blank lines are counted in `reader.blank_lines` and
    `reader.done` follows the lines split. A stream that breaks off yields
    the lines read before the break, then raises.
    """
    return _bounded(_chunk_lines(reader, fh), max_lines, max_bytes)


def _chunk_lines(reader: FileReader, fh: BinaryIO) -> Iterator[LineBlock]:
    """The non-blank lines of `fh`, a block per chunk read."""
    max_line_bytes = reader.max_line_bytes
    head = b""  # kept bytes of a line continuing into the next chunk
    length = 0  # full length of that line so far
    first = True
    # The same reads as `split_lines`, so that a stream that breaks off
    # gives the same lines before the break.
    while chunk := fh.read(line_splitting.CHUNK_BYTES):
        if first:
            chunk = chunk.removeprefix(codecs.BOM_UTF8)
            first = False
        # A line begun in an earlier chunk is whole or its raw prefix by
        # now, so it can be split as if it started this chunk.
        data = head + chunk
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == _NEWLINE)
        if len(ends):
            block = _split(data, ends, length - len(head), reader)
            if len(block):
                yield block
            tail = data[ends[-1] + 1 :]
            length = len(tail)
        else:
            tail = data
            length += len(chunk)
        head = tail if length <= max_line_bytes else tail[:RAW_LIMIT_BYTES]
    if length:  # a last line without a terminator
        reader.done += 1
        line = head.removesuffix(b"\r")
        if line and not line.isspace():
            yield LineBlock(
                np.array([reader.done]),
                pa.array([line], pa.large_binary()),
                np.array([length]),
            )
        else:
            reader.blank_lines += 1


def _split(data: bytes, ends: np.ndarray, unkept: int, reader: FileReader) -> LineBlock:
    """The non-blank lines of `data` that end at `ends` (the positions of its
    newlines), counted in `reader`; the first line has `unkept` more bytes
    than `data` holds."""
    raw = np.frombuffer(data, np.uint8)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    spans = ends - starts
    lengths = spans.copy()
    lengths[0] += unkept
    oversized = lengths > reader.max_line_bytes
    kept = np.where(oversized, np.minimum(spans, RAW_LIMIT_BYTES), spans)
    # A "\r" the newline follows is part of the terminator (and of the
    # length), as is one that ends an oversized line's raw prefix.
    kept -= (kept > 0) & (raw[starts + kept - 1] == _RETURN)
    blank = kept == 0
    spaced = ~blank & _SPACE[raw[starts]]
    if spaced.any():
        # Only a line that starts with whitespace can be all whitespace.
        at = np.flatnonzero(spaced)
        ranges = np.column_stack([starts[at], starts[at] + kept[at]]).ravel()
        blank[at] = np.logical_and.reduceat(_SPACE[raw], ranges)[::2]
    reader.blank_lines += int(blank.sum())
    first_number = reader.done + 1
    reader.done += len(ends)
    keep = np.flatnonzero(~blank)
    # Each line, then the bytes between it and the next one, as an array
    # over `data` itself; taking the lines copies only their own bytes.
    offsets = np.empty(2 * len(ends), np.int64)
    offsets[0::2] = starts
    offsets[1::2] = starts + kept
    lines_and_gaps = pa.Array.from_buffers(
        pa.large_binary(),
        len(offsets) - 1,
        [None, pa.py_buffer(offsets), pa.py_buffer(data)],
    )
    return LineBlock(
        first_number + keep, lines_and_gaps.take(pa.array(2 * keep)), lengths[keep]
    )


def _bounded(
    blocks: Iterable[LineBlock], max_lines: int, max_bytes: int
) -> Iterator[LineBlock]:
    """`blocks` regrouped into blocks of at most `max_lines` lines, each ended
    once it has `max_bytes` bytes."""
    pending: list[LineBlock] = []
    lines = size = 0
    try:
        for block in blocks:
            while len(block):
                part = block.sliced(0, max_lines - lines)
                block = block.sliced(len(part))
                pending.append(part)
                lines += len(part)
                size += part.lines.nbytes
                if lines == max_lines or size >= max_bytes:
                    yield _joined(pending)
                    pending, lines, size = [], 0, 0
    except Exception:
        # The lines read before a damaged part are still the stream's.
        if pending:
            yield _joined(pending)
        raise
    if pending:
        yield _joined(pending)


def _joined(blocks: list[LineBlock]) -> LineBlock:
    if len(blocks) == 1:
        return blocks[0]
    return LineBlock(
        np.concatenate([b.numbers for b in blocks]),
        pa.concat_arrays([b.lines for b in blocks]),
        np.concatenate([b.lengths for b in blocks]),
    )

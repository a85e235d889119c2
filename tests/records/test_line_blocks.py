"""Blocks of lines as columns give exactly the lines of `FileReader.lines`.

Each case is split both ways, with the stream read in chunks small enough
for lines, terminators, byte-order marks and oversized lines to straddle
them: the lines (number, kept bytes, full length), the reader's counts, and
what a stream that breaks off gives before the break must all agree.
"""

import io
import random

import numpy as np
import pytest

from transforms.records import lines
from transforms.records.file_reader import FileReader
from transforms.records.line_blocks import line_blocks
from transforms.records.lines import RAW_LIMIT_BYTES

BOM = b"\xef\xbb\xbf"
CHUNKS = [1, 2, 3, 4, 7, 64, 1 << 20]


class Breaking(io.RawIOBase):
    """`data`, read in the chunks asked for, until read `reads` times; then
    every read raises, as a damaged compressed file does."""

    def __init__(self, data: bytes, reads: int) -> None:
        self._data = io.BytesIO(data)
        self._reads = reads

    def read(self, size: int = -1) -> bytes:
        if not self._reads:
            raise OSError("damaged")
        self._reads -= 1
        return self._data.read(size)


def _reader(max_line_bytes):
    return FileReader(None, "SearchQuery", max_line_bytes, "s.jsonl")


def _per_line(fh, max_line_bytes):
    """`FileReader.lines` of `fh`, the error it ended with, and its counts."""
    reader = _reader(max_line_bytes)
    got, error = [], None
    try:
        got.extend(reader.lines(fh))
    except OSError as e:
        error = e
    return got, error, (reader.done, reader.blank_lines)


def _columnar(fh, max_line_bytes, max_lines, max_bytes):
    """As `_per_line`, by `line_blocks`, and the block sizes."""
    reader = _reader(max_line_bytes)
    got, sizes, error = [], [], None
    try:
        for block in line_blocks(reader, fh, max_lines, max_bytes):
            got.extend(block.lines_at(np.arange(len(block))))
            sizes.append(len(block))
    except OSError as e:
        error = e
    return got, error, (reader.done, reader.blank_lines), sizes


def _assert_same(data, max_line_bytes=100, max_lines=1 << 16, max_bytes=1 << 24):
    """Both ways of splitting `data` agree; returns the lines."""
    expected, _, counts = _per_line(io.BytesIO(data), max_line_bytes)
    got, _, got_counts, sizes = _columnar(
        io.BytesIO(data), max_line_bytes, max_lines, max_bytes
    )
    assert got == expected
    assert got_counts == counts
    assert all(0 < size <= max_lines for size in sizes)
    return expected


@pytest.fixture(params=CHUNKS)
def chunk(request, monkeypatch):
    monkeypatch.setattr(lines, "CHUNK_BYTES", request.param)
    return request.param


def test_lines_spanning_chunks_come_out_whole(chunk):
    data = b"hello\nwide world\r\n\nend\n" + b"a,b,c\n" * 20
    assert len(_assert_same(data)) == 23


def test_an_oversized_line_spanning_chunks_keeps_its_raw_prefix(chunk):
    long_line = bytes(range(11, 256)) * 42  # 10290 bytes, no newline
    data = b"ok\n" + long_line + b"\r\nnext\n" + long_line
    assert _assert_same(data, max_line_bytes=5000)[1] == (2, long_line[:4096], 10291)
    _assert_same(data, max_line_bytes=4)
    _assert_same(data, max_line_bytes=10291)


def test_a_raw_prefix_ending_in_a_carriage_return_loses_it(chunk):
    line = b"x" * (RAW_LIMIT_BYTES - 1) + b"\r" + b"y" * 100
    assert _assert_same(line + b"\n" + line, max_line_bytes=200)[0][1] == b"x" * 4095


def test_a_carriage_return_ending_one_chunk_before_the_newline(monkeypatch):
    monkeypatch.setattr(lines, "CHUNK_BYTES", 8)
    data = b"1234567\r\nabcdef\r\r\nend\r"
    assert _assert_same(data) == [
        (1, b"1234567", 8),
        (2, b"abcdef\r", 8),
        (3, b"end", 4),
    ]


def test_a_byte_order_mark_only_at_the_start(chunk):
    _assert_same(BOM + b"a\n" + BOM + b"b\n")
    _assert_same(BOM)
    _assert_same(BOM + b"\n" + BOM)


def test_a_last_line_without_a_newline(chunk):
    assert _assert_same(b"a\nb")[-1] == (2, b"b", 1)
    assert _assert_same(b"a\nb\r")[-1] == (2, b"b", 2)
    _assert_same(b"a\n  ")
    _assert_same(b"x" * 300, max_line_bytes=10)


def test_blank_lines_alone(chunk):
    assert _assert_same(b"\n \n\t\r\n\x0b\x0c\r\n\r\r\n  ") == []
    assert _assert_same(b"") == []


def test_carriage_returns_and_newlines_everywhere(chunk):
    rows = [b"a", b"", b" b ", b"\x0b", b"c\x0c", b"\x0c\x0bd", b"\r", b"e\r"]
    _assert_same(b"\r\n".join(rows * 5))
    _assert_same(b"\r\n".join(rows * 5) + b"\r\n")


def test_a_long_run_of_spaces_is_blank_by_its_raw_prefix(chunk):
    spaces = b" " * (RAW_LIMIT_BYTES + 10) + b"x"
    assert _assert_same(b"a\n" + spaces + b"\nb", max_line_bytes=50) == [
        (1, b"a", 1),
        (3, b"b", 1),
    ]


def test_blocks_are_bounded_by_lines_and_bytes(monkeypatch):
    monkeypatch.setattr(lines, "CHUNK_BYTES", 50)
    data = b"".join(b"line %d\n" % i for i in range(200))
    for max_lines, max_bytes in [(1, 1 << 20), (7, 1 << 20), (1000, 100)]:
        _assert_same(data, max_lines=max_lines, max_bytes=max_bytes)
    _, _, _, sizes = _columnar(io.BytesIO(data), 100, 1000, 100)
    assert len(sizes) > 10


@pytest.mark.parametrize("reads", [0, 1, 2, 5, 9])
def test_a_stream_that_breaks_off_gives_the_lines_before_the_break(monkeypatch, reads):
    monkeypatch.setattr(lines, "CHUNK_BYTES", 10)
    data = b"".join(b"line %d\n\n" % i for i in range(30))
    per_line = _per_line(Breaking(data, reads), 100)
    columnar = _columnar(Breaking(data, reads), 100, 4, 1 << 20)
    assert columnar[0] == per_line[0]
    assert columnar[2] == per_line[2]
    assert str(columnar[1]) == str(per_line[1]) == "damaged"


# What fuzzed streams are made of: the bytes that end, blank or mark lines.
PARTS = [b"\n", b"\r", b"\r\n", b" ", b"\t", b"\x0b", b"\x0c", BOM, b"q", b"{}", b"ab"]


@pytest.mark.parametrize("seed", range(20))
def test_fuzzed_streams_split_alike(monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(lines, "CHUNK_BYTES", rng.choice([1, 2, 5, 16, 100]))
    parts = [rng.choice(PARTS) for _ in range(rng.randrange(400))]
    if rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts) + 1), b"z" * rng.randrange(5000))
    _assert_same(
        b"".join(parts),
        max_line_bytes=rng.choice([1, 3, 20, 5000]),
        max_lines=rng.choice([1, 3, 50]),
        max_bytes=rng.choice([10, 1 << 20]),
    )

"""Line splitting: terminators, chunk boundaries, oversized lines, CSV fields."""

import csv
import io

import pytest

from transforms.records import lines
from transforms.records.lines import (
    RAW_LIMIT_BYTES,
    QuoteLeftOpen,
    csv_fields,
    quote_left_open,
    split_lines,
)


def split(data: bytes, max_line_bytes: int = 100) -> list[tuple[int, bytes, int]]:
    return list(split_lines(io.BytesIO(data), max_line_bytes))


def test_lines_are_numbered_from_one_without_terminators():
    assert split(b"a\nbb\r\n\nccc") == [
        (1, b"a", 1),
        (2, b"bb", 3),
        (3, b"", 0),
        (4, b"ccc", 3),
    ]


def test_trailing_newline_does_not_make_an_extra_line_and_empty_input_has_none():
    assert split(b"a\n") == [(1, b"a", 1)]
    assert split(b"") == []
    assert split(b"\n") == [(1, b"", 0)]


def test_byte_order_mark_is_dropped_only_at_the_start():
    bom = b"\xef\xbb\xbf"
    assert split(bom + b"x\n" + bom + b"y") == [(1, b"x", 1), (2, bom + b"y", 4)]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_lines_spanning_chunks_are_joined(monkeypatch, chunk):
    monkeypatch.setattr(lines, "CHUNK_BYTES", chunk)

    assert split(b"hello\nwide world\r\n\nend") == [
        (1, b"hello", 5),
        (2, b"wide world", 11),
        (3, b"", 0),
        (4, b"end", 3),
    ]


@pytest.mark.parametrize("chunk", [1000, 1 << 20])
def test_oversized_line_keeps_only_its_raw_prefix(monkeypatch, chunk):
    monkeypatch.setattr(lines, "CHUNK_BYTES", chunk)
    long_line = bytes(range(11, 256)) * 42  # 10290 bytes, no newline

    result = split(b"ok\n" + long_line + b"\nnext\n", max_line_bytes=5000)

    assert result == [
        (1, b"ok", 2),
        (2, long_line[:4096], 10290),
        (3, b"next", 4),
    ]
    assert RAW_LIMIT_BYTES == 4096


def test_line_exactly_at_the_limit_is_kept_whole():
    assert split(b"abcde\nabcdef", max_line_bytes=5) == [
        (1, b"abcde", 5),
        (2, b"abcdef", 6),
    ]


def test_unterminated_oversized_last_line_is_reported(monkeypatch):
    monkeypatch.setattr(lines, "CHUNK_BYTES", 3)

    assert split(b"x" * 10, max_line_bytes=4) == [(1, b"x" * 10, 10)]


def test_csv_fields_split_plain_and_quoted_lines():
    assert csv_fields("a,b,,c ") == ["a", "b", "", "c "]
    assert csv_fields('"hello, world",x,"say ""hi"""') == [
        "hello, world",
        "x",
        'say "hi"',
    ]


@pytest.mark.parametrize("text", ['a,"unterminated', 'a,"b"c'])
def test_csv_fields_rejects_broken_quoting(text):
    with pytest.raises(csv.Error):
        csv_fields(text)


@pytest.mark.parametrize("text", ['"open', 'a,"b""c', 'a"b,"c', '"\udcff'])
def test_csv_fields_says_when_a_quoted_field_is_left_open(text):
    with pytest.raises(QuoteLeftOpen, match="may not hold line breaks"):
        csv_fields(text)


@pytest.mark.parametrize(
    ("text", "in_quote", "left_open"),
    [
        ("plain,row", False, False),
        ('"say ""hi""",x', False, False),
        ('a"b,c', False, False),  # a quote inside an unquoted field
        ('a,"open', False, True),
        ('a"b,"open', False, True),
        ('"a"b,"c', False, False),  # refused mid-line: the record ends there
        ("more text, no quote", True, True),
        ('closing",1,2', True, False),
        ('escaped "" quote', True, True),
        ('closed", then,"reopened', True, True),
        ('""', True, True),  # an escaped quote, not a close
        ('closed"x,1', True, False),  # refused after closing
        ("", True, True),
    ],
)
def test_quote_left_open_follows_a_quoted_field_across_lines(text, in_quote, left_open):
    assert quote_left_open(text, in_quote) is left_open

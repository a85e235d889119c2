"""CSV and JSON Lines searches read into Arrow tables, a block of lines at a time.

The per-line reader (`FileReader`) decodes, parses and validates each line in
Python. Here a file's lines are split and numbered as there (blank lines,
the BOM, "\\r\\n" and oversized lines alike) but held as columns, a block at
a time (`line_blocks`), and each block is judged as a column: a line is
*eligible* when a regular expression proves that Arrow's CSV or JSON reader
parses it exactly as Python's `csv` or `json` would, into values `screen`
can check.
The eligible lines are parsed by Arrow in one call and screened; every other
line, and every row `screen` cannot clear, is read by the per-line reader
itself (`FileReader.jsonl_record`, `FileReader.csv_record`) with its own line
number. So the valid searches, dead letters and counters are exactly those of
`ReadSearchQueries`, and only the common, plainly written line is cheaper.

Eligible JSON Lines: one flat object of one or more members, spaces and
tabs its only whitespace. Its members are
- the search keys `query`, `record_id` (each a string or null), `count`
  (an integer of at most 18 digits, or null) and `event_time` (such an
  integer, a string, or null), their names written without escapes, each
  at most once (the per-line parser refuses a field given twice,
  `RowWithRepeats`, where Arrow refuses the block);
- and other keys, which both readers ignore, named by one or more of
  `[A-Za-z0-9_]` (so that no escape can spell a search key), each with a
  string, true, false, null, or a number of at most 18 integer digits and
  at most 2 exponent digits (Python refuses an integer of over 4300 digits;
  Arrow refuses a double out of range, which Python reads as inf). Such a
  key may repeat: neither reader uses its value.
Strings hold no raw control character (U+0000 to U+001F) and may hold any
JSON escape ("\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\uXXXX"
in either case) but a "\\u" escape of a UTF-16 surrogate that is not a
high one followed by a low one: Python decodes a lone surrogate into a
`str` protobuf cannot encode, Arrow refuses it. Arrow decodes every other
escape as Python does ("\\u0000" too), and `screen` judges the decoded
string (a query blank once decoded goes to the per-line path). So floats
and big integers as search values, NaN, nested values, keys named with
escapes or other characters, and lone surrogates go to the per-line path.
An event time written as a string is judged, once decoded, as a CSV one is
(below): a plain integer or an ISO time of `iso_millis`' form is read
columnar, any other string ("", "+1700000000000", " 1700000000000",
"2026-W02-1", "2026-01-05T00:00:00+05", ...) goes to the per-line path.
Arrow reads a column of one type, so the lines whose event time is a
string are read in a call of their own, with that column as text.

Eligible CSV rows: as many fields as the header has columns, each either
without quotes or wholly quoted without quotes inside, no "\\r" or NUL, and,
if it has quotes, shorter than `csv.field_size_limit()`; and not the rest
of an earlier row's record (`FileReader.quote_opened_after`: a line after
one that leaves a quoted field open, up to the one that closes it), which
only the per-line reader follows.
A row whose `event_time` is neither a plain integer (`-?[0-9]{1,18}`, so
no sign, space or underscore that `int()` would also take) nor an ISO-8601
time of the common form `iso_times.iso_millis` converts as the parser does
(`2026-01-05T00:00:00.065+0000`, with "T" or a space, an optional fraction
of up to 6 digits and an optional "Z", "+HH:MM" or "+HHMM" zone, no
surrounding spaces), or whose `count` is neither a plain integer nor
empty, is left to the per-line path. A file
whose header is bad (it names no `query` or `event_time` column, say) or
has more than `_MAX_CSV_COLUMNS` columns is read line by line.
"""

from __future__ import annotations

import csv
import itertools
import string
from collections.abc import Generator, Iterator
from typing import Any, BinaryIO

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
from apache_beam.io import fileio

from transforms.records.file_reader import CsvHeader, FileReader
from transforms.records.iso_times import iso_millis
from transforms.records.line_blocks import LineBlock, line_blocks
from transforms.records.parse import parse_search_query
from transforms.records.readers import read_file
from transforms.records.search_screen import SEARCH_SCHEMA, screen, with_rescued
from transforms.records.zeitgeist_pb2 import SearchQuery

# A block is big enough for Arrow to pay off, small enough to bound memory.
_BLOCK_LINES = 1 << 16
_BLOCK_BYTES = 16 << 20
_RECORD_TYPE = SearchQuery.DESCRIPTOR.name
_FIELDS = SEARCH_SCHEMA.names
# What both formats parse into, for `screen`: `SEARCH_SCHEMA`, nulls allowed.
_READ_SCHEMA = pa.schema([pa.field(f.name, f.type) for f in SEARCH_SCHEMA])
# JSON lines whose event time is a string are read with this schema, apart
# from the others: Arrow refuses a number in a string column.
_STRING_TIME_SCHEMA = _READ_SCHEMA.set(
    _READ_SCHEMA.get_field_index("event_time"), pa.field("event_time", pa.string())
)
# What `_JsonLines.eligible` says of a line: not eligible, or eligible and
# read with `_READ_SCHEMA` (an integer, null or no event time) or with
# `_STRING_TIME_SCHEMA` (a string event time).
_NOT_ELIGIBLE, _INTEGER_TIME, _STRING_TIME = 0, 1, 2

_SPACE = "[ \\t]*"
_HEX = "[0-9A-Fa-f]"
# A "\u" escape of a code unit that is not a surrogate, or of a high
# surrogate followed by a low one: Arrow refuses a lone surrogate, which
# Python decodes into a `str` that protobuf cannot encode.
_UNICODE_ESCAPE = (
    f"\\\\u(?:[0-9A-Ca-cE-Fe-f]{_HEX}{{3}}|[Dd][0-7]{_HEX}{{2}}"
    f"|[Dd][89ABab]{_HEX}{{2}}\\\\u[Dd][C-Fc-f]{_HEX}{{2}})"
)
_JSON_STRING = f'"(?:[^"\\\\\\x00-\\x1f]|\\\\["\\\\/bfnrt]|{_UNICODE_ESCAPE})*"'
_JSON_INT = "-?(?:0|[1-9][0-9]{0,17})"
# Bounded so that Python's `int` stays under its digit limit and Arrow's
# double stays finite (where Python would read "1e999" as inf).
_JSON_NUMBER = f"{_JSON_INT}(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]{{1,2}})?"
_JSON_VALUES = {
    "query": _JSON_STRING,
    "record_id": _JSON_STRING,
    "event_time": _JSON_INT,
    "count": _JSON_INT,
}
_NAME_CHARS = string.ascii_letters + string.digits + "_"


def _names_other_than(words: set[str], empty: bool = False) -> str:
    """Strings of `_NAME_CHARS` not in `words` (the empty one only if
    `empty`), spelt out character by character, as RE2 has no lookahead."""
    firsts = sorted({word[0] for word in words if word})
    others = "".join(c for c in _NAME_CHARS if c not in firsts)
    branches = [f"[{others}][{_NAME_CHARS}]*"]
    for first in firsts:
        rest = {word[1:] for word in words if word[:1] == first}
        branches.append(first + _names_other_than(rest, "" not in rest))
    either = f"(?:{'|'.join(branches)})"
    return either + "?" if empty else either


def _json_object_pattern(event_time: str) -> str:
    """A flat object of search keys, with values of their `_JSON_VALUES`
    form (`event_time`'s given) or null, and other keys, named plainly,
    with scalar values."""
    scalar = f"(?:{_JSON_STRING}|{_JSON_NUMBER}|true|false|null)"
    other = f'"{_names_other_than(set(_JSON_VALUES))}"{_SPACE}:{_SPACE}{scalar}'
    values = {**_JSON_VALUES, "event_time": event_time}
    members = [
        f'"{key}"{_SPACE}:{_SPACE}(?:{value}|null)' for key, value in values.items()
    ]
    member = f"(?:{'|'.join([*members, other])})"
    return (
        f"^{_SPACE}\\{{{_SPACE}{member}(?:{_SPACE},{_SPACE}{member})*"
        f"{_SPACE}\\}}{_SPACE}$"
    )


def _repeated_key_pattern() -> str:
    """A search key twice. In a line of `_JSON_OBJECT`, a quote after "{",
    ",", a space or a tab and before a letter opens a string (a quote inside
    a string follows a backslash, and a closing one is followed by no
    letter), and that string followed by ":" is a key. RE2 cannot refer
    back to a key it has matched, so each is spelt out."""
    keys = [f'[{{,]{_SPACE}"{key}"{_SPACE}:' for key in _JSON_VALUES]
    return "|".join(f"{key}.*{key}" for key in keys)


_JSON_OBJECT = _json_object_pattern(_JSON_VALUES["event_time"])
_JSON_OBJECT_STRING_TIME = _json_object_pattern(_JSON_STRING)
# The per-line parser refuses a field given twice, where Arrow refuses the block.
_REPEATED_KEY = _repeated_key_pattern()

_CSV_FIELD = '(?:[^",\\r\\x00]*|"[^"\\r\\x00]*")'
_MAX_CSV_COLUMNS = 100  # RE2 repeats at most 1000 times
_PLAIN_INT = "^-?[0-9]{1,18}$"


def read_text_searches(reader: FileReader, fmt: str, fh: BinaryIO) -> Iterator[Any]:
    """The outputs of the CSV or JSON Lines file `fh` (`fmt`): per block of
    lines, its dead letters and a table of its valid searches."""
    blocks = line_blocks(reader, fh, _BLOCK_LINES, _BLOCK_BYTES)
    if fmt == "csv":
        header, blocks = yield from _csv_header(reader, blocks)
        text_format: _JsonLines | _Csv = _Csv(header)
    else:
        text_format = _JsonLines()
    for block in blocks:
        yield from _read_block(reader, block, text_format)


def _csv_header(
    reader: FileReader, blocks: Iterator[LineBlock]
) -> Generator[Any, None, tuple[CsvHeader, Iterator[LineBlock]]]:
    """`FileReader.csv_header` of the first line of `blocks`, and the
    blocks of the lines after it."""
    first = next(blocks, None)
    header_line = iter(()) if first is None else first.lines_at(np.arange(1))
    header = yield from reader.csv_header(header_line)
    if first is None or len(first) == 1:
        return header, blocks
    return header, itertools.chain([first.sliced(1)], blocks)


def _read_block(
    reader: FileReader, block: LineBlock, text_format: _JsonLines | _Csv
) -> Iterator[Any]:
    """One block's dead letters, then its valid searches as one table."""
    texts, readable = _texts(block, reader.max_line_bytes)
    # Each line's kind: not eligible (0), or how the format is to read it
    # (JSON Lines has two, `_INTEGER_TIME` and `_STRING_TIME`; CSV one).
    kinds = np.where(readable, text_format.eligible(texts), _NOT_ELIGIBLE)
    # Lines that are part of an earlier line's record are plain in form only.
    kinds[text_format.continued(reader, block, kinds)] = _NOT_ELIGIBLE
    eligible = np.flatnonzero(kinds)
    batch = pa.RecordBatch.from_pylist([], schema=_READ_SCHEMA)
    try:
        if len(eligible):
            batch = text_format.parse(texts.take(eligible), kinds[eligible])
    except pa.ArrowInvalid:
        # The rules admit only lines Arrow reads; should Arrow still refuse
        # one, the block is read line by line rather than lost to the file's
        # `unreadable_file` dead letter.
        eligible = eligible[:0]
    screened = screen(batch)
    reader.records_read += screened.searches.num_rows
    judged = np.ones(len(block), bool)
    judged[np.delete(eligible, screened.suspects)] = False
    verdicts = (
        text_format.judge(reader, *line)
        for line in block.lines_at(np.flatnonzero(judged))
    )
    return with_rescued(screened.searches, verdicts)


def _texts(block: LineBlock, max_line_bytes: int) -> tuple[pa.Array, np.ndarray]:
    """The block's lines as strings (empty where unreadable), and which are
    readable: within the size limit and valid UTF-8."""
    readable = block.lengths <= max_line_bytes
    raw = block.lines
    if not readable.all():
        raw = pc.if_else(readable, raw, b"")
    try:
        return raw.cast(pa.large_string()), readable
    except pa.ArrowInvalid:  # rare: find the lines that are not UTF-8
        readable &= _utf8(raw)
        return pc.if_else(readable, raw, b"").cast(pa.large_string()), readable


def _utf8(raw: pa.Array) -> np.ndarray:
    """Which of `raw`'s strings are valid UTF-8, for a block Arrow found
    not to be: Arrow checks an array only as a whole, so Python checks each
    string, as the per-line path would."""
    return np.array([_decodes(line) for line in raw.to_pylist()], bool)


def _decodes(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _joined_lines(texts: pa.Array) -> pa.Buffer:
    """`texts` joined by newlines, as Arrow's readers read them."""
    whole = pa.LargeListArray.from_arrays(pa.array([0, len(texts)], pa.int64()), texts)
    newline = pa.scalar("\n", pa.large_string())
    return pc.binary_join(whole, newline)[0].as_buffer()


def _matches(texts: pa.Array, pattern: str) -> np.ndarray:
    return pc.match_substring_regex(texts, pattern).to_numpy(zero_copy_only=False)


class _JsonLines:
    """JSON Lines: which lines Arrow reads as Python would, and reading them."""

    def eligible(self, texts: pa.Array) -> np.ndarray:
        """Each line's `_INTEGER_TIME`, `_STRING_TIME` or `_NOT_ELIGIBLE`."""
        kinds = np.where(_matches(texts, _JSON_OBJECT), _INTEGER_TIME, _NOT_ELIGIBLE)
        # Only the lines the common pattern refused are tried for a string
        # time, so that files of integer times pay nothing for it.
        rest = np.flatnonzero(kinds == _NOT_ELIGIBLE)
        string_time = _matches(texts.take(rest), _JSON_OBJECT_STRING_TIME)
        kinds[rest[string_time]] = _STRING_TIME
        kinds[_matches(texts, _REPEATED_KEY)] = _NOT_ELIGIBLE
        return kinds

    def parse(self, texts: pa.Array, kinds: np.ndarray) -> pa.RecordBatch:
        """The eligible lines `texts` (of `kinds`) as columns of `_FIELDS`,
        in their order: those with integer and with string times read
        apart, each kind in one call."""
        string_time = kinds == _STRING_TIME
        if string_time.all() or not string_time.any():
            return _read_json(texts, bool(string_time[0]))
        rows = [np.flatnonzero(~string_time), np.flatnonzero(string_time)]
        batches = [_read_json(texts.take(rows[0]), False)]
        batches.append(_read_json(texts.take(rows[1]), True))
        return pa.concat_batches(batches).take(np.argsort(np.concatenate(rows)))

    def continued(
        self, reader: FileReader, block: LineBlock, kinds: np.ndarray
    ) -> np.ndarray:
        """None: a JSON Lines record is one line."""
        return np.zeros(0, np.int64)

    def judge(self, reader: FileReader, line_no: int, line: bytes, length: int) -> Any:
        return reader.jsonl_record(line, length, line_no)


def _read_json(texts: pa.Array, string_time: bool) -> pa.RecordBatch:
    """JSON lines as columns of `_READ_SCHEMA`, other keys ignored; if their
    event times are strings (`string_time`), read as such and converted as
    CSV's are (`_event_millis`)."""
    lines = _joined_lines(texts)
    table = pa_json.read_json(
        pa.BufferReader(lines),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=lines.size + 1),
        parse_options=pa_json.ParseOptions(
            explicit_schema=_STRING_TIME_SCHEMA if string_time else _READ_SCHEMA,
            unexpected_field_behavior="ignore",
        ),
    )
    batch = table.combine_chunks().to_batches()[0]
    if not string_time:
        return batch
    at = batch.schema.get_field_index("event_time")
    millis = _event_millis(batch.column(at))
    return batch.set_column(at, pa.field("event_time", pa.int64()), millis)


class _Csv:
    """CSV rows under a header: which Arrow reads as Python would, and reading them."""

    def __init__(self, header: CsvHeader) -> None:
        self._header = header
        names = header if isinstance(header, list) else []
        # Arrow's column names, since the header's may be anything.
        self._names = [f"c{i}" for i in range(len(names))]
        self._wanted = {
            name: self._names[names.index(name)] for name in _FIELDS if name in names
        }
        # `FileReader.csv_header` refuses a header without `query` and
        # `event_time`, so `_wanted` has both if there are `names`.
        self._row = None
        if names and len(names) <= _MAX_CSV_COLUMNS:
            self._row = f"^{_CSV_FIELD}(?:,{_CSV_FIELD}){{{len(names) - 1}}}$"

    def eligible(self, texts: pa.Array) -> np.ndarray:
        if self._row is None:
            return np.zeros(len(texts), bool)
        # `csv.reader`, which reads the lines with quotes, refuses a field
        # longer than its limit; Arrow has none.
        short = pc.less(pc.utf8_length(texts), csv.field_size_limit())
        unquoted = pc.invert(pc.match_substring(texts, '"'))
        fits = pc.or_(unquoted, short).to_numpy(zero_copy_only=False)
        return _matches(texts, self._row) & fits

    def parse(self, texts: pa.Array, kinds: np.ndarray) -> pa.RecordBatch:
        """The eligible rows `texts` (all of one kind) as columns of
        `_FIELDS`; a row whose time is neither a plain integer nor an ISO
        time of `iso_millis`' form, or whose count is not a plain integer,
        gets no event time, so that `screen` leaves it to the per-line path."""
        wanted = self._wanted
        lines = _joined_lines(texts)
        table = pa_csv.read_csv(
            pa.BufferReader(lines),
            read_options=pa_csv.ReadOptions(
                column_names=self._names, use_threads=False, block_size=lines.size + 1
            ),
            parse_options=pa_csv.ParseOptions(
                escape_char=False, newlines_in_values=False, ignore_empty_lines=False
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in wanted.values()},
                include_columns=list(wanted.values()),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        ).combine_chunks()
        text = {name: table.column(column).chunk(0) for name, column in wanted.items()}
        rows = table.num_rows
        # No count column reads as empty counts: unset, as in the parser.
        count = text.get("count", pa.nulls(rows, pa.string()).fill_null(""))
        count_plain = pc.match_substring_regex(count, _PLAIN_INT)
        columns = {
            "query": text["query"],
            "event_time": pc.if_else(
                pc.or_(pc.equal(count, ""), count_plain),
                _event_millis(text["event_time"]),
                None,
            ),
            "count": pc.if_else(count_plain, count, None).cast(pa.int64()),
            "record_id": text.get("record_id", pa.nulls(rows, pa.string())),
        }
        return pa.RecordBatch.from_pydict(columns, schema=_READ_SCHEMA)

    def continued(
        self, reader: FileReader, block: LineBlock, kinds: np.ndarray
    ) -> np.ndarray:
        """The positions of the lines that continue a quoted field an
        earlier row left open, up to the one that closes it, as
        `FileReader.quote_opened_after` follows them from where the block
        starts; the per-line path must judge them, in their turn.

        Only a row that cannot be read, so one not eligible, can leave a
        quoted field open; a line without a quote cannot.
        """
        if not kinds.any():
            return np.zeros(0, np.int64)  # every line is judged one by one
        maybe = np.flatnonzero(kinds == _NOT_ELIGIBLE)
        quoted = pc.match_substring(block.lines.take(pa.array(maybe)), '"')
        maybe = maybe[quoted.to_numpy(zero_copy_only=False)]
        runs = []
        end = 0  # the position after the last run followed
        if reader.quote_opened_on is not None:
            end = _follow(reader, block, reader.quote_opened_on, 0)
            runs.append(np.arange(end))
        for at, (line_no, line, length) in zip(
            maybe.tolist(), block.lines_at(maybe), strict=True
        ):
            if at < end:
                continue  # a line of the last run
            opened_on = reader.quote_opened_after(None, line_no, line, length)
            if opened_on is not None:
                end = _follow(reader, block, opened_on, at + 1)
                runs.append(np.arange(at + 1, end))
        return np.concatenate(runs) if runs else np.zeros(0, np.int64)

    def judge(self, reader: FileReader, line_no: int, line: bytes, length: int) -> Any:
        return reader.csv_record(self._header, line, length, line_no)


def _follow(reader: FileReader, block: LineBlock, opened_on: int, start: int) -> int:
    """The position after the line of `block`, from `start` on, that closes
    the quoted field row `opened_on` left open (`len(block)` if none does)."""
    for at, (line_no, line, length) in enumerate(_lines_from(block, start), start):
        if reader.quote_opened_after(opened_on, line_no, line, length) is None:
            return at + 1
    return len(block)


def _lines_from(block: LineBlock, start: int) -> Iterator[tuple[int, bytes, int]]:
    """The lines of `block` from `start` on, taken a few at first and more
    as they go: most quoted fields left open end a line or two later, but
    one never closed runs to the end of the file."""
    step = 8
    while start < len(block):
        stop = min(start + step, len(block))
        yield from block.lines_at(np.arange(start, stop))
        start, step = stop, 2 * step


def _event_millis(times: pa.Array) -> pa.Array:
    """Event times written as text (CSV fields, JSON strings) as epoch ms:
    plain integers as written (the parser reads the text of an integer as
    that integer), ISO times of `iso_millis`' form converted, null for any
    other."""
    plain = pc.match_substring_regex(times, _PLAIN_INT)
    integers = pc.if_else(plain, times, None).cast(pa.int64())
    return pc.coalesce(integers, iso_millis(times))


class ReadSearchTextFile(beam.DoFn):
    """Reads one CSV or JSON Lines file into tables of searches and dead letters."""

    def __init__(self, fmt: str, max_line_bytes: int) -> None:
        self._format = fmt
        self._max_line_bytes = max_line_bytes

    def process(self, readable_file: fileio.ReadableFile) -> Iterator[Any]:
        return read_file(
            readable_file.metadata.path,
            parse_search_query,
            _RECORD_TYPE,
            self._format,
            self._max_line_bytes,
            read_text_searches,
        )

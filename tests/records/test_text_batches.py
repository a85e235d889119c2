"""CSV and JSON Lines read into Arrow tables give what the per-line reader gives.

Files mixing every kind of good and bad line are read twice, by
`FileReader.read` (line by line) and by `read_text_searches` (eligible lines
through Arrow, the rest line by line): the valid searches, the dead letters
(line number, reason, raw bytes) and the reader's counts must be identical,
and the plainly written lines must not have taken the per-line path. A
seeded fuzz of mutated good lines checks the same, and a pipeline checks
`ReadSearchBatches` against `ReadSearchQueries`, counters included.
"""

import csv
import datetime as dt
import gzip
import json
import random
from collections import Counter

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.pvalue import TaggedOutput
from apache_beam.testing.util import assert_that, equal_to

from tests.records.reader_outputs import counters, letters, search_tuple
from transforms.records import text_batches
from transforms.records.file_reader import FileReader
from transforms.records.lines import CHUNK_BYTES
from transforms.records.parse import parse_search_query
from transforms.records.readers import RECORDS, ReadSearchQueries, read_file
from transforms.records.search_batches import ReadSearchBatches
from transforms.records.text_batches import read_text_searches

T = 1700000000000
MAX_LINE_BYTES = 300
SEED = 13


def _json(**fields) -> bytes:
    return json.dumps(fields).encode()


def _good_jsonl(i: int) -> bytes:
    """A line as the generator writes them (`json.dumps`' spacing)."""
    return _json(query=f"q{i % 7}", event_time=T + i, record_id=f"r{i}", count=i % 3)


QUERIES = ["caf\u00e9", "na\u00efve \u3000 \u00fcber", "\U0001f600 emoji", 'say "hi"',
           "back\\slash/", "tab\tnew\nline", "\x00nul\x1f", "\x7f\u2028"]  # fmt: skip
EXTRAS = [{}, {"ua": "Mozilla/5.0 \u00e9", "ts": "2024"}, {"s": 1.5e-3, "ok": True}]


def _escaped_jsonl(i: int) -> bytes:
    """A line as `json.dumps` writes it by default (`ensure_ascii`): non-ASCII
    and special characters escaped, and other keys before and after."""
    extras = EXTRAS[i % len(EXTRAS)]
    fields = dict(query=QUERIES[i % len(QUERIES)], event_time=T + i, count=i % 3)
    return _json(**extras, **fields, **{f"k{i}": f"v\u00e9{i}"})


JSONL_LINES = [
    _good_jsonl(1),
    b'{"event_time":1700000000001,"query":"compact"}',
    b'\t{ "count" : 0 , "query" : "tabs" ,\t"event_time" : 1700000000002 }  ',
    '{"query": "caf\u00e9 \u3000 na\u00efve", "event_time": 1700000000003}'.encode(),
    b'{"query": "null fields", "event_time": 1700000000004, "count": null, '
    b'"record_id": null}',
    b'{"query": "empty id", "event_time": 1700000000005, "record_id": ""}',
    b'{"query": "zero", "event_time": 1700000000006, "count": -0}',
    b'{"query": "caf\\u00e9", "event_time": 1700000000007}',  # an escape
    b'{"query": "say \\"hi\\"", "event_time": 1700000000008}',
    b'{"query": "lone \\ud800", "event_time": 1700000000009}',
    b'{"query": "a", "query": "b", "event_time": 1700000000010}',  # last wins
    b'{"query": "a", "event_time": 1, "event_time": 1700000000011}',
    b'{"query": "a", "event_time": 1700000000012, "event_time": 1}',
    b'{"query": "nan", "event_time": NaN}',
    b'{"query": "inf", "event_time": 1700000000013, "count": Infinity}',
    b'{"query": "float count", "event_time": 1700000000014, "count": 1.0}',
    b'{"query": "half count", "event_time": 1700000000015, "count": 1.5}',
    b'{"query": "float time", "event_time": 1.700000000016e12}',
    b'{"query": "huge", "event_time": 1700000000017, "count": 123456789012345678901}',
    b'{"query": "19 digits", "event_time": 1700000000018, '
    b'"count": 1234567890123456789}',
    b'{"query": "18 digits", "event_time": 1700000000019, "count": 123456789012345678}',
    b'{"query": "negative", "event_time": 1700000000020, "count": -1}',
    b'{"query": "leading zero", "event_time": 1700000000021, "count": 01}',
    b'{"query": {"nested": 1}, "event_time": 1700000000022}',
    b'{"query": ["list"], "event_time": 1700000000023}',
    b'{"query": 5, "event_time": 1700000000024}',
    b'{"query": "bool", "event_time": 1700000000025, "count": true}',
    b'{"query": "id int", "event_time": 1700000000026, "record_id": 7}',
    b'{"query": "extra", "event_time": 1700000000027, "source": "web"}',
    b'{"query": "text time", "event_time": "2024-01-01T00:00:00Z"}',
    b'{"query": "digit text", "event_time": "1700000000028"}',
    b'{"query": "old", "event_time": 5}',
    b'{"query": "", "event_time": 1700000000029}',
    b'{"query": "   ", "event_time": 1700000000030}',
    '{"query": "\u3000\u2028", "event_time": 1700000000031}'.encode(),
    _json(query="x" * 200, event_time=T),  # fits the line limit
    _json(query="y" * 400, event_time=T),  # oversized
    b'{"query": "tab\tinside", "event_time": 1700000000032}',
    b'{"query": "no time"}',
    b'{"event_time": 1700000000033}',
    b"{}",
    b"[1, 2]",
    b'"just a string"',
    b"42",
    b'{"query": "cut", "event_time": 17',
    b'{"query": "trailing", "event_time": 1700000000034} x',
    b'{"query": "bad \xff byte", "event_time": 1700000000035}',
    b'{"query": "ok", "event_time": 1700000000036, "note": "\xfe"}',
    b'{"query": "surrogate \xed\xa0\x80", "event_time": 1700000000040}',
    b'{"query": "del \x7f bom \xef\xbb\xbf", "event_time": 1700000000041}',
    b'{"query": "overlong \xc0\x80", "event_time": 1700000000042}',
    b'\xef\xbb\xbf{"query": "inner bom", "event_time": 1700000000037}',
    b'{"query": "cr\r", "event_time": 1700000000038}',
    b'{"query": "cr", "event_time": 1700000000039}\r',  # "\r\r\n" ending
    *(_escaped_jsonl(i) for i in range(6)),
    b'{"query": "\\n", "event_time": 1700000000043}',  # blank once decoded
    b'{"query": "\\u0000", "event_time": 1700000000044}',
    b'{"query": "\\ude00\\ud83d reversed", "event_time": 1700000000045}',
    b'{"query": "low \\udc00", "event_time": 1700000000046}',
    b'{"query": "a", "qu\\u0065ry": "b", "event_time": 1700000000047}',
    b'{"query": "a", "event_time": 1700000000048, "note": "\\ud800"}',
    b'{"query": "a", "event_time": 1700000000049, "n": 1e999}',
    b'{"query": "a", "event_time": 1700000000051, "x": 1, "x": [2]}',
    b"",
    b"   \t",
]

CSV_HEADER = b" query , event_time,count,record_id,source"
CSV_LINES = [
    b"plain,1700000000000,2,r1,web",
    b'"quoted","1700000000001","3","r2","web"',
    b'"with, comma",1700000000002,,"",',
    b'"",1700000000003,1,,',  # empty query
    b"  padded  ,1700000000004,1,,",
    "\u00e9t\u00e9 \u3000,1700000000005,1,,".encode(),
    b'"say ""hi""",1700000000006,1,,',  # doubled quotes
    b'"a"b,1700000000007,1,,',  # text after a closing quote
    b'a"b,1700000000008,1,,',  # a quote inside an unquoted field
    b' "lead",1700000000009,1,,',
    b'"open,1700000000010,1,,',  # a quoted field left open: the lines up
    b"still open,1700000000010,1,,",  # to the one that closes it are the
    b'closed,1700000000011,"1",,',  # rest of its record, not rows
    b'x,"not \xff utf-8',  # the same from a line that is not UTF-8
    b'line",1700000000012,1,,',
    b"too,few",
    b"too,many,1,2,3,4",
    b"iso,2024-01-01T00:00:00,1,,",
    b"iso z,2024-01-01T00:00:00+00:00,1,,",
    b"iso space,2024-01-01 00:00:00.5-05:30,1,,",
    b"iso compact zone,2024-01-01T00:00:00.065+0000,1,,",
    b"iso feb 30,2024-02-30T00:00:00Z,1,,",
    b"iso early,1999-12-31T23:30:00-00:29,1,,",
    b"iso padded, 2024-01-01T00:00:00Z,1,,",
    b"spaced, 1700000000011 ,1,,",
    b"plus,+1700000000012,1,,",
    b"underscores,1_700_000_000_013,1,,",
    "arabic,\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660"
    "\u0660\u0660,1,,".encode(),
    b"leading zeros,01700000000014,007,,",
    b"old,5,1,,",
    b"19 digits,1700000000015,1234567890123456789,,",
    b"count spaced,1700000000016, 3 ,,",
    b"count float,1700000000017,3.0,,",
    b"count negative,1700000000018,-1,,",
    b"count word,1700000000019,many,,",
    b"   ,1700000000020,1,,",
    b"cr\rinside,1700000000021,1,,",
    b"nul\x00inside,1700000000022,1,,",
    b"bad \xff,1700000000023,1,,",
    b"extra bad,1700000000024,1,,\xfe",
    b"x" * 200 + b",1700000000025,1,,",
    b"y" * 400 + b",1700000000026,1,,",
    b"last,1700000000027,1,r3,web\r",  # "\r\r\n" ending
    b"",
    b"  ",
]


def _outputs(path, fmt, read, max_line_bytes=MAX_LINE_BYTES):
    """(searches, dead letters, reader counts) of one way of reading a file."""
    searches, dead = [], []
    counts = Counter()

    def counting(reader: FileReader, fmt, fh):
        yield from read(reader, fmt, fh)
        counts.update(records=reader.records_read, blank=reader.blank_lines)

    for out in read_file(
        str(path), parse_search_query, "SearchQuery", fmt, max_line_bytes, counting
    ):
        if isinstance(out, TaggedOutput):
            d = out.value
            dead.append((d.source, d.location, d.reason, d.raw, d.record_type))
        elif isinstance(out, pa.Table):
            searches += [tuple(row.values()) for row in out.to_pylist()]
        else:
            searches.append(search_tuple(out))
    return sorted(searches, key=repr), sorted(dead, key=repr), counts


def _assert_same(path, fmt, max_line_bytes=MAX_LINE_BYTES):
    """Both readers agree on `path`; returns the per-line reader's outputs."""
    per_line = _outputs(path, fmt, FileReader.read, max_line_bytes)
    columnar = _outputs(path, fmt, read_text_searches, max_line_bytes)
    assert columnar[0] == per_line[0]
    assert columnar[1] == per_line[1]
    assert columnar[2] == per_line[2]
    return per_line


def _write(path, lines, ending=b"\n", bom=False):
    data = (b"\xef\xbb\xbf" if bom else b"") + ending.join(lines)
    path.write_bytes(data)
    return path


@pytest.fixture
def per_line_calls(monkeypatch):
    """How many lines each format read one by one, in the columnar reader."""
    calls = Counter()
    for name in ("jsonl_record", "csv_record"):
        original = getattr(FileReader, name)

        def spy(self, *args, original=original, name=name):
            calls[name] += 1
            return original(self, *args)

        monkeypatch.setattr(FileReader, name, spy)
    return calls


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
@pytest.mark.parametrize("bom", [False, True])
def test_every_kind_of_json_line_is_read_as_line_by_line(tmp_path, ending, bom):
    path = _write(tmp_path / "s.jsonl", JSONL_LINES, ending, bom)
    searches, dead, counts = _assert_same(path, "jsonl")
    assert len(searches) >= 15 and len(dead) >= 30
    assert counts["blank"] == 2


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
@pytest.mark.parametrize("bom", [False, True])
def test_every_kind_of_csv_row_is_read_as_line_by_line(tmp_path, ending, bom):
    path = _write(tmp_path / "s.csv", [CSV_HEADER, *CSV_LINES], ending, bom)
    searches, dead, counts = _assert_same(path, "csv")
    assert len(searches) >= 10 and len(dead) >= 15
    assert counts["blank"] == 2


@pytest.mark.parametrize(
    "header",
    [
        b"query,event_time,query",  # a column twice
        b'"query,event_time',  # broken quoting
        b"query,time,count",  # no event_time column
        b"event_time",  # no query column
        b"Query,Event_Time,Count,Record_Id,Source",  # names of another case
        b"query;event_time;count;record_id;source",  # another separator
        None,  # no header at all: the first row is taken for one
        b",".join([b"query", b"event_time"] + [b"c%d" % i for i in range(120)]),
    ],
)
def test_files_whose_header_is_not_plain_are_read_line_by_line(tmp_path, header):
    lines = [b"", header, *CSV_LINES] if header else [b"", *CSV_LINES]
    path = _write(tmp_path / "h.csv", lines)
    searches, dead, _ = _assert_same(path, "csv")
    # No row is read, and every line is a dead letter, the header's too.
    assert not searches
    assert len(dead) == sum(1 for line in lines if line.strip())


# Lines after a row that leaves a quoted field open, up to the one that
# closes it (each run a row, then its lines).
QUOTE_RUNS = [
    [b'"multi', b'line",%d,r,1' % T],
    [b'"a', b"plain in form,%d,r,1" % T, b'b",%d,r,1' % T],
    [b'x,"y', b'closed then refused,%d,"r",1' % T],  # plain in form too
    [b'"not \xff UTF-8', b'z",%d,r,1' % T],
    [b'"blank lines', b"", b"  ", b'end",%d,r,1' % T],
    [b'"oversized', b"o" * 400, b"still open", b'end",%d,r,1' % T],
    [b'"say ""hi', b'there""",%d,r,1' % T],  # quotes escaped, then closed
]


@pytest.mark.parametrize("block_lines", [5, 1 << 16])
def test_lines_continuing_an_open_quoted_field_are_read_as_line_by_line(
    tmp_path, monkeypatch, per_line_calls, block_lines
):
    monkeypatch.setattr(text_batches, "_BLOCK_LINES", block_lines)
    plain = [b"q%d,%d,r%d,1" % (i, T + i, i) for i in range(80)]
    lines = [b"query,event_time,record_id,count"]
    for i, run in enumerate(QUOTE_RUNS):
        lines += [*plain[10 * i : 10 * i + 10], *run]
    never_closed = [b'"to the end', *plain[70:]]
    path = _write(tmp_path / "q.csv", lines + never_closed)

    _outputs(path, "csv", read_text_searches)
    in_runs = [line for run in QUOTE_RUNS for line in run if line.strip()]
    # The rows after a run are read as columns again.
    assert per_line_calls == {"csv_record": len(in_runs) + len(never_closed)}
    searches, dead, _ = _assert_same(path, "csv")
    assert len(searches) == 70
    assert len(dead) == len(in_runs) + len(never_closed)
    reasons = Counter(d[2].split(" on line")[0].split(" at byte")[0] for d in dead)
    assert reasons == {
        "invalid CSV: a quoted field is still open at the end of the line "
        "(quoted fields may not hold line breaks)": len(QUOTE_RUNS),
        "invalid UTF-8": 1,
        "invalid CSV: continues the quoted field left open": len(dead)
        - len(QUOTE_RUNS)
        - 1,
    }


def test_a_quoted_field_over_the_csv_modules_limit_is_refused_as_there(tmp_path):
    limit = csv.field_size_limit()
    rows = [b'"long",%d,1,"%s",' % (T, b"r" * n) for n in (limit - 100, limit + 1)]
    rows.append(b"unquoted,%d,1,%s," % (T, b"r" * (limit + 1)))
    path = _write(tmp_path / "l.csv", [CSV_HEADER, *rows])
    searches, dead, _ = _assert_same(path, "csv", max_line_bytes=4 * limit)
    assert len(searches) == 2
    assert [d[2] for d in dead] == [
        f"invalid CSV: field larger than field limit ({limit})"
    ]


def test_plain_lines_never_take_the_per_line_path(tmp_path, per_line_calls):
    jsonl = _write(tmp_path / "g.jsonl", [_good_jsonl(i) for i in range(500)])
    rows = [b'"q%d",%d,"r%d",%d' % (i % 7, T + i, i, i % 3) for i in range(250)]
    rows += [b"q%d,%d,r%d,%d" % (i % 7, T + i, i, i % 3) for i in range(250)]
    header = b"query,event_time,record_id,count"
    csv = _write(tmp_path / "g.csv", [header, *rows])
    for path, fmt in [(jsonl, "jsonl"), (csv, "csv")]:
        assert len(_outputs(path, fmt, read_text_searches)[0]) == 500
    assert not per_line_calls
    for path, fmt in [(jsonl, "jsonl"), (csv, "csv")]:
        _assert_same(path, fmt)


def test_odd_lines_alone_take_the_per_line_path(tmp_path, per_line_calls):
    odd = [
        b'{"query": "float", "event_time": 1700000000000, "count": 2.0}',
        b'{"query": "lone \\ud800", "event_time": 1700000000000}',
        b'{"query": "a", "query": "b", "event_time": 1700000000000}',
        b'{"query": "n", "event_time": 1700000000000, "count": NaN}',
        b'{"query": "x", "event_time": 1700000000000, "source": {"web": 1}}',
    ]
    lines = [_good_jsonl(i) for i in range(100)]
    lines[10:90:16] = odd
    path = _write(tmp_path / "o.jsonl", lines)
    _outputs(path, "jsonl", read_text_searches)
    assert per_line_calls == {"jsonl_record": len(odd)}


ISO_TIMES = [
    "2024-01-01T00:00:00",
    "2024-01-01 00:00:00.5",
    "2024-01-01T00:00:00Z",
    "2026-01-05T00:00:00.065+0000",
    "2024-02-29T05:30:00.123456+05:30",
    "2023-12-31T19:00:00.12-0500",
    "2000-01-01T00:00:00Z",
    "2100-01-01T00:00:00Z",
    "2000-01-01T05:30:00+05:30",
]
# Times Python reads, or refuses, that the column does not convert, or that
# it converts to a time out of range.
ISO_TIMES_PER_LINE = [
    "2024-02-30T00:00:00",
    "2023-02-29T00:00:00",
    "2100-02-29T00:00:00Z",
    "2024-01-01t00:00:00",
    " 2024-01-01T00:00:00Z",
    "2024-01-01T00:00:00+05",
    "2024-01-01T00:00:00.1234567",
    "2024-01-01T00:00:00,5",
    "2024-01-01T24:00:00",
    "2024-01-01T23:59:60",
    "2024-01-01T00:00:00+24:00",
    "2024-01-01T00:00:00+00:60",
    "2024-W01-1",
    "20240101T000000",
    "1999-12-31T23:59:59.999Z",
    "2100-01-01T00:00:00.001Z",
    "2000-01-01T00:30:00+01:00",
    "2099-12-31T23:30:00-00:31",
]


def _iso_rows(times: list[str], count: int) -> list[bytes]:
    """`count` rows with the `times` in turn, quoted and not (always
    quoted if the time has a comma)."""
    rows = []
    for i in range(count):
        time = times[i % len(times)].encode()
        quoted = b'"q%d","%s","%d","r%d"' % (i % 7, time, i % 3, i)
        plain = b"q%d,%s,%d,r%d" % (i % 7, time, i % 3, i)
        rows.append(quoted if i % 2 or b"," in time else plain)
    return rows


def test_iso_times_take_the_columnar_path(tmp_path, per_line_calls):
    header = b"query,event_time,count,record_id"
    path = _write(tmp_path / "i.csv", [header, *_iso_rows(ISO_TIMES, 500)])
    assert len(_outputs(path, "csv", read_text_searches)[0]) == 500
    assert not per_line_calls
    _assert_same(path, "csv")


def test_iso_times_the_column_does_not_convert_take_the_per_line_path(
    tmp_path, per_line_calls
):
    rows = _iso_rows(ISO_TIMES, 3 * len(ISO_TIMES_PER_LINE))
    rows[1::3] = _iso_rows(ISO_TIMES_PER_LINE, len(ISO_TIMES_PER_LINE))
    path = _write(tmp_path / "i.csv", [b"query,event_time,count,record_id", *rows])
    _outputs(path, "csv", read_text_searches)
    assert per_line_calls == {"csv_record": len(ISO_TIMES_PER_LINE)}
    searches, dead, _ = _assert_same(path, "csv")
    assert len(dead) == 10 and len(searches) == len(rows) - 10


def _assert_columnar(path, per_line_calls, per_line=0, max_line_bytes=MAX_LINE_BYTES):
    """Both readers agree on `path`, and the columnar one read `per_line`
    of its lines one by one."""
    _outputs(path, "jsonl", read_text_searches, max_line_bytes)
    assert per_line_calls == ({"jsonl_record": per_line} if per_line else {})
    return _assert_same(path, "jsonl", max_line_bytes)


# JSON event times, as written in a line, that the column reads: ISO times
# of `iso_millis`' form, escaped or not, and the text of an integer, which
# the parser reads as that integer.
JSON_TIMES = [
    *(json.dumps(time) for time in ISO_TIMES),
    '"2026-01-05T00:00:00.065+00:00"',
    '"\\u0032024-01-01T00:00:00\\u005a"',
    '"2024-01-01\\u005400:00:00.5+05:30"',
    '"1700000000000"',
    '"01700000000000"',
]
# JSON event times the column leaves to the per-line path: strings it does
# not convert (Python reads some, refuses others) or converts to a time out
# of range, and values that are neither integers nor strings.
JSON_TIMES_PER_LINE = [
    *(json.dumps(time) for time in ISO_TIMES_PER_LINE),
    '""', '" 1700000000000"', '"1700000000000 "', '"+1700000000000"', '"123"',
    '"-0"', '"1_700_000_000_000"', '"1234567890123456789012"',
    '"\\u0661\\u0667\\u0660\\u0660\\u0660\\u0660\\u0660\\u0660\\u0660"',
    '"2024-01-01T00:00:00Z\\n"', '"2024-01-01T00:00:00\\u0000"',
    '"\\ud800"', '"2024-01-01T00:00:00Z\\udc00"', '"2024-01-01T00:00:00\\x5a"',
    '"2024-01-01T00:00:00Z", "event_time": 1700000000000',
    '1700000000000, "event_time": "2024-01-01T00:00:00Z"',
    '"2024-01-01T00:00:00Z", "event_time": "2024-01-02T00:00:00Z"',
    "1.7e12", "1700000000000.0", "true", "null", '["2024-01-01T00:00:00Z"]',
]  # fmt: skip


def _time_jsonl(times: list[str], count: int) -> list[bytes]:
    """`count` lines with the JSON event `times` in turn, spaced and
    ordered in different ways."""
    forms = [
        '{{"query": "q{i}", "event_time": {time}, "count": 1, "record_id": "r{i}"}}',
        '{{"event_time":{time},"query":"q{i}"}}',
        '\t{{ "ua" : "x" , "query" : "q{i}" ,"event_time" :\t{time} , "n": 1.5 }} ',
    ]
    return [
        forms[i % len(forms)].format(i=i % 7, time=times[i % len(times)]).encode()
        for i in range(count)
    ]


def test_string_times_in_json_take_the_columnar_path(tmp_path, per_line_calls):
    lines = _time_jsonl(JSON_TIMES, 400)
    lines[::4] = [_good_jsonl(i) for i in range(100)]  # integer times among them
    path = _write(tmp_path / "t.jsonl", lines)
    searches, _, _ = _assert_columnar(path, per_line_calls)
    assert len(searches) == len(lines)
    times = Counter(search[1] for search in searches)
    # 2026-01-05T00:00:00.065Z, 2024-01-01T00:00:00Z, and the integer's text.
    assert min(times[1767571200065], times[1704067200000], times[T]) > 10


def test_string_times_in_json_the_column_does_not_clear_take_the_per_line_path(
    tmp_path, per_line_calls
):
    count = len(JSON_TIMES_PER_LINE)
    # Each odd line between one with an ISO time and one with an integer
    # time, so that a line read by the wrong path changes the outputs.
    lines = _time_jsonl(JSON_TIMES, 3 * count)
    lines[1::3] = _time_jsonl(JSON_TIMES_PER_LINE, count)
    lines[2::3] = [_good_jsonl(i) for i in range(count)]
    path = _write(tmp_path / "t.jsonl", lines)
    searches, dead, _ = _assert_columnar(path, per_line_calls, per_line=count)
    # 22 bad times, and the 3 lines naming event_time twice.
    twice = [d for d in dead if d[2] == "field 'event_time' is given twice"]
    assert len(twice) == 3
    assert len(dead) == 25 and len(searches) == len(lines) - 25


ESCAPES = [b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t",
           b"\\u0000", b"\\u001f", b"\\u00e9", b"\\u00E9", b"\\u00Ea", b"\\uffff",
           b"\\ud7ff\\ue000", b"\\ud83d\\ude00", b"\\uD83D\\uDE00",
           b"\\udbff\\udfff", b"\\u0020\\u2028"]  # fmt: skip


def test_escaped_strings_take_the_columnar_path(tmp_path, per_line_calls):
    lines = [
        b'{"query": "q%s", "event_time": %d, "record_id": "%s"}' % (e, T, e)
        for e in ESCAPES
    ]
    # `json.dumps` escapes by default (`ensure_ascii`).
    lines += [_json(query=q, event_time=T, record_id=q) for q in QUERIES]
    path = _write(tmp_path / "e.jsonl", lines)
    searches, _, _ = _assert_columnar(path, per_line_calls)
    assert len(searches) == len(lines)
    assert ("q\x00", T, None, "\x00") in searches
    assert ("\U0001f600 emoji", T, None, "\U0001f600 emoji") in searches


OTHER_MEMBERS = [
    b'"user_agent": "Mozilla/5.0 (X11; Linux x86_64)"',
    b'"ts_iso": "2024-01-01T00:00:00Z"',
    b'"_": "\\u00e9\\n\\"\\ud83d\\ude00"',
    b'"n": 0', b'"n": -1.5e-3', b'"n": 123456789012345678.123456789012345678E+99',
    b'"n": -0.0', b'"n": 1E-99', b'"t": true', b'"f": false', b'"z": null',
    b'"Query": 1', b'"queryx": "y"', b'"event_tim": 2', b'"counts": 3',
    b'"record_id_2": "r"', b'"x": 1, "x": "repeated"',
]  # fmt: skip


def test_other_keys_take_the_columnar_path(tmp_path, per_line_calls):
    lines = [
        b'{%s, "query": "a", "event_time": %d}' % (m, T) for m in OTHER_MEMBERS
    ] + [
        b'{"query": "b",%s\t,"event_time": %d, %s, "count": 2}' % (m, T, m)
        for m in OTHER_MEMBERS
    ]
    lines += [_escaped_jsonl(i) for i in range(24)]
    path = _write(tmp_path / "k.jsonl", lines)
    searches, _, _ = _assert_columnar(path, per_line_calls)
    assert len(searches) == len(lines)


# Lines Arrow would read otherwise than Python, or refuse, or whose values
# `screen` cannot clear.
PER_LINE = [
    b'{"query": "lone \\ud800", "event_time": 1700000000000}',
    b'{"query": "\\uD83D", "event_time": 1700000000000}',
    b'{"query": "low \\udc00", "event_time": 1700000000000}',
    b'{"query": "\\ude00\\ud83d", "event_time": 1700000000000}',
    b'{"query": "\\ud83d\\u0041", "event_time": 1700000000000}',
    b'{"query": "\\ud83d\\ude00\\ud83d", "event_time": 1700000000000}',
    b'{"query": "q", "event_time": 1700000000000, "record_id": "\\udfff"}',
    b'{"query": "q", "event_time": 1700000000000, "note": "\\udbff"}',
    b'{"query": "q", "event_time": 1700000000000, "x\\ud800": 1}',
    b'{"query": "a", "qu\\u0065ry": "b", "event_time": 1700000000000}',
    b'{"qu\\u0065ry": "b", "event_time": 1700000000000}',
    b'{"query": "a", "event_\\u0074ime": 1700000000000}',
    b'{"query": "a", "event_time": 1700000000000, "n\\u0061me": 1}',
    b'{"query": "a", "event_time": 1700000000000, "\\/": 1}',
    b'{"query": "a", "event_time": 1700000000000, "": 1}',
    b'{"query": "a", "event_time": 1700000000000, "query": "b"}',
    b'{"query":"a","event_time":1,"x":1, "event_time" :1700000000000}',
    b'{"count": 1, "query": "a", "event_time": 1700000000000,\t"count":2}',
    b'{"query": "a", "event_time": 1700000000000, "x": {"a": 1}}',
    b'{"query": "a", "event_time": 1700000000000, "x": [1]}',
    b'{"query": "a", "event_time": 1700000000000, "x": 1e999}',
    b'{"query": "a", "event_time": 1700000000000, "x": 1e309}',
    b'{"query": "a", "event_time": 1700000000000, "x": NaN}',
    b'{"query": "a", "event_time": 1700000000000, "x": -Infinity}',
    b'{"query": "a", "event_time": 1700000000000, "x": 01}',
    b'{"query": "a", "event_time": 1700000000000, "x": 1.}',
    b'{"query": "a", "event_time": 1700000000000, "x": "\\x41"}',
    b'{"query": "\\u12", "event_time": 1700000000000}',
    b'{"query": "\\U00e9", "event_time": 1700000000000}',
    b'{"query": "\\a", "event_time": 1700000000000}',
    b'{"query": "\\n", "event_time": 1700000000000}',  # blank once decoded
    b'{"query": "\\t\\u3000\\u0085", "event_time": 1700000000000}',
]


def test_lines_arrow_cannot_read_as_python_does_take_the_per_line_path(
    tmp_path, per_line_calls
):
    lines = [_good_jsonl(i) for i in range(3 * len(PER_LINE))]
    lines[1::3] = PER_LINE
    path = _write(tmp_path / "p.jsonl", lines)
    _assert_columnar(path, per_line_calls, per_line=len(PER_LINE))


def test_numbers_python_or_arrow_cannot_hold_take_the_per_line_path(
    tmp_path, per_line_calls
):
    numbers = [b"9" * 5000, b"9" * 19, b"1" + b"0" * 400 + b".5", b"1e100"]
    lines = [b'{"query": "a", "event_time": %d, "n": %s}' % (T, n) for n in numbers]
    long_fraction = b'{"query": "a", "event_time": %d, "n": 1.%s}' % (T, b"1" * 5000)
    path = _write(tmp_path / "n.jsonl", [long_fraction, *lines])
    searches, dead, _ = _assert_columnar(path, per_line_calls, len(lines), 6000)
    assert len(searches) == 4
    assert len(dead) == 1 and dead[0][2].startswith("invalid JSON")


def test_lines_not_utf8_alone_take_the_per_line_path(tmp_path, per_line_calls):
    rng = random.Random(SEED)
    rows = [_good_jsonl(i) for i in range(1000)]
    bad = rng.sample(range(1000), 9)
    for i in bad:
        rows[i] = rows[i].replace(b"q", b"\xe9", 1)
    path = _write(tmp_path / "u.jsonl", rows)
    _, dead, _ = _outputs(path, "jsonl", read_text_searches)
    assert len(dead) == len(bad)
    assert per_line_calls == {"jsonl_record": len(bad)}
    _assert_same(path, "jsonl")


def test_a_block_arrow_refuses_is_read_line_by_line(tmp_path, monkeypatch):
    def refuse(self, *args):
        raise pa.ArrowInvalid("refused")

    monkeypatch.setattr(text_batches._JsonLines, "parse", refuse)
    monkeypatch.setattr(text_batches, "_BLOCK_LINES", 10)
    path = _write(tmp_path / "r.jsonl", [_good_jsonl(i) for i in range(25)])
    assert len(_assert_same(path, "jsonl")[0]) == 25


def test_blocks_keep_line_numbers_across_their_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(text_batches, "_BLOCK_LINES", 5)
    _assert_same(_write(tmp_path / "b.jsonl", JSONL_LINES * 3), "jsonl")
    csv = _write(tmp_path / "b.csv", [CSV_HEADER, *CSV_LINES * 3])
    _assert_same(csv, "csv")


def test_compressed_files_and_files_cut_short(tmp_path):
    data = b"\n".join(JSONL_LINES * 20)
    whole = tmp_path / "s.jsonl.gz"
    whole.write_bytes(gzip.compress(data))
    _assert_same(whole, "jsonl")
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(data)[:-200])
    searches, dead, _ = _assert_same(cut, "jsonl")
    unreadable = [d for d in dead if d[2].startswith("unreadable file after line")]
    assert searches and len(unreadable) == 1


def test_empty_files_and_lone_headers(tmp_path):
    for name, lines in [("e.jsonl", []), ("e.csv", []), ("h.csv", [CSV_HEADER])]:
        path = _write(tmp_path / name, lines)
        assert _assert_same(path, name.split(".")[1]) == ([], [], Counter())


# Fragments a mutation inserts: JSON and CSV syntax, escapes, odd numbers,
# whitespace Python and Arrow may see differently, and bytes that are not UTF-8.
FRAGMENTS = [
    '"', "\\", ",", ":", "{", "}", "[", "]", " ", "\t", "\r", "\x00", "\x1f",
    "0", "-", "+", ".", "e", "1.0", "NaN", "null", "true", "_", "\u00e9",
    "\u3000", "\u0661", "\\u00e9", '\\"', '"query": "dup", ', '"count": 2, ',
    '"event_time": 1700000000000, ', '"x": 1, ', "9" * 19, '""', '"a,b"',
    "2024-01-01T00:00:00Z", "\ufeff", "\\n", "\\/", "\\\\", "\\u0000", "\\uDE00",
    "\\ud83d\\ude00", "\\ud800", "\\udc00", "\\u00", "\\x", '"k": "v", ',
    "T", "Z", "+05:30", "-0800", ".123", "60", "29",
    '"k": 1.5e-3, ', '"k": {"a": 1}, ', '"k": 1e999, ', '"qu\\u0065ry": "e", ',
    '"count\\u0000": 1, ',
]  # fmt: skip


def _mutate(rng: random.Random, line: bytes) -> bytes:
    """`line` with one to three random edits."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(line) + 1)
        edit = rng.randrange(5)
        if edit == 0:
            line = line[:at] + line[at + 1 :]
        elif edit == 1:
            line = line[:at] + rng.choice(FRAGMENTS).encode() + line[at:]
        elif edit == 2:
            line = line[:at] + rng.choice(FRAGMENTS).encode() + line[at + 1 :]
        elif edit == 3:
            line = line[:at] + bytes([rng.randrange(0x80, 0x100)]) + line[at:]
        else:
            end = rng.randrange(at, len(line) + 1)
            line = line[:at] + line[at:end] * 2 + line[end:]
    return line


ISO_ZONES = [None, dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
             dt.timezone(-dt.timedelta(hours=8))]  # fmt: skip


def _iso_time(millis: int, i: int) -> bytes:
    """Epoch `millis` as an ISO time in one of the ways logs write them."""
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=millis)
    zone = ISO_ZONES[i % len(ISO_ZONES)]
    when = when.astimezone(zone) if zone else when.replace(tzinfo=None)
    if i % 3 == 0:
        return when.isoformat().encode()
    if i % 3 == 1:
        return when.isoformat(" ", "microseconds").encode()
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3].encode() + (
        b"Z" if zone is dt.UTC else when.strftime("%z").encode()
    )


def _fuzzed(rng: random.Random, good: list[bytes]) -> list[bytes]:
    return [_mutate(rng, g) if rng.random() < 0.6 else g for g in good]


@pytest.mark.parametrize(
    "seed, chunk_bytes",
    [(0, CHUNK_BYTES), (1, CHUNK_BYTES), (2, CHUNK_BYTES)]
    + [(3, 1), (4, 97), (5, 4096)],  # lines across the chunks the file is read in
)
def test_fuzzed_files_are_read_as_line_by_line(
    tmp_path, monkeypatch, seed, chunk_bytes
):
    rng = random.Random(SEED * 100 + seed)
    monkeypatch.setattr(text_batches, "_BLOCK_LINES", 97)
    monkeypatch.setattr("transforms.records.lines.CHUNK_BYTES", chunk_bytes)
    good_json = [_good_jsonl(i) for i in range(1000)] + JSONL_LINES
    good_json += [_escaped_jsonl(i) for i in range(500)]
    good_json += [
        _json(query=f"q{i % 7}", event_time=_iso_time(T + 7919 * i, i).decode())
        for i in range(500)
    ] + [_json(query=f"q{i % 7}", event_time=str(T + i)) for i in range(100)]
    good_csv = (
        [b'"q%d",%d,"r%d",%d' % (i % 7, T + i, i, i % 3) for i in range(750)]
        + [b"q%d,%d,,%d" % (i % 7, T + i, i % 3) for i in range(750)]
        + [
            b"q%d,%s,,%d" % (i % 7, _iso_time(T + 7919 * i, i), i % 3)
            for i in range(750)
        ]
        + CSV_LINES
    )
    rng.shuffle(good_json)
    rng.shuffle(good_csv)
    jsonl = _write(tmp_path / "f.jsonl", _fuzzed(rng, good_json))
    header = b"query,event_time,record_id,count"
    csv = _write(tmp_path / "f.csv", [header, *_fuzzed(rng, good_csv)])
    for path, fmt in [(jsonl, "jsonl"), (csv, "csv")]:
        searches, dead, _ = _assert_same(path, fmt, max_line_bytes=160)
        assert len(searches) > 500 and len(dead) > 500


def test_pipeline_reads_text_as_the_per_line_reader_does(tmp_path):
    _write(tmp_path / "a.jsonl", JSONL_LINES, b"\r\n", bom=True)
    _write(tmp_path / "b.csv", [CSV_HEADER, *CSV_LINES])
    _write(tmp_path / "no_header.csv", CSV_LINES)
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(b"\n".join(JSONL_LINES)))
    for pattern, fmt in [("*.jsonl*", "jsonl"), ("*.csv", "csv")]:
        expected = ([], [])
        for path in sorted(tmp_path.glob(pattern)):
            searches, dead, _ = _outputs(path, fmt, FileReader.read, 1 << 20)
            expected[0].extend(searches)
            expected[1].extend(dead)
        totals = []
        for read in (ReadSearchQueries, ReadSearchBatches):
            p = beam.Pipeline()
            out = p | read(str(tmp_path / pattern), fmt)
            if read is ReadSearchBatches:
                rows = out[RECORDS] | beam.FlatMap(
                    lambda t: [tuple(r.values()) for r in t.to_pylist()]
                )
            else:
                rows = out[RECORDS] | beam.Map(search_tuple)
            assert_that(rows, equal_to(expected[0]), label="Searches")
            assert_that(letters(out), equal_to(expected[1]), label="Dead")
            result = p.run()
            result.wait_until_finish()
            totals.append(counters(result))
        assert totals[0]["dead_letters"] == len(expected[1]) > 10
        assert totals[1] == totals[0]

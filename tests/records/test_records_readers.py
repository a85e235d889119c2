"""ReadRecords on real files: every format, every bad case, and the counters."""

import datetime as dt
import gzip
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.records.reader_outputs import counters, letters
from transforms.records import ClickEvent, DeadLetter, QueryEvent, SearchQuery
from transforms.records.parse import parse_search_query
from transforms.records.readers import (
    DEAD_LETTERS,
    RECORDS,
    ReadClickEvents,
    ReadQueryEvents,
    ReadRecords,
    ReadSearchQueries,
    infer_format,
)

T = 1700000000000
NEW_YEAR_2024 = 1704067200000


LONG_QUERY = "x" * 5000
MIXED_LINES = [
    b'{"query": "good one", "event_time": 1700000000000, "record_id": "g1"}',
    b'{"query": "broken", ',
    b"",
    b"[1, 2]",
    b'{"event_time": 1700000000000}',
    b'{"query": 5, "event_time": 1700000000000}',
    b'{"query": "neg", "event_time": 1700000000000, "count": -3}',
    b'{"query": "   ", "event_time": 1700000000000}',
    b'{"query": "old", "event_time": 1}',
    b'{"query": "' + LONG_QUERY.encode() + b'", "event_time": 1700000000000}',
    b'{"query": "caf\xe9", "event_time": 1700000000000}',
    b'{"query": "iso", "event_time": "2024-01-01T00:00:00Z", "count": "2"}',
    b'{"query": "flag", "event_time": 1700000000000, "count": true}',
    b"   ",
    b'"just a string"',
]
MIXED_RECORDS = [
    SearchQuery(query="good one", event_time=T, record_id="g1"),
    SearchQuery(query="iso", event_time=NEW_YEAR_2024, count=2),
]


def mixed_dead_letters(source: str) -> list[tuple]:
    """Hand-written: (source, location, reason, raw, record_type) per bad line."""
    long_line = MIXED_LINES[9]
    bad = [
        (2, "invalid JSON: Expecting property name enclosed in double quotes"),
        (4, "JSON value is an array, not an object"),
        (5, "missing field 'query'"),
        (6, "field 'query' must be a string, got int"),
        (7, "field 'count' must be a non-negative integer, got -3"),
        (8, "field 'query' must be a non-empty string"),
        (9, "field 'event_time' must be between 2000-01-01 and 2100-01-01 UTC, got 1"),
        (
            10,
            "line is 5042 bytes, over the limit of 1000 bytes; "
            "raw form truncated to 4096 bytes",
        ),
        (11, "invalid UTF-8 at byte 14: invalid continuation byte"),
        (13, "field 'count' must be a non-negative integer, got True"),
        (15, "JSON value is a string, not an object"),
    ]
    assert len(long_line) == 5042
    raws = {n: MIXED_LINES[n - 1] for n, _ in bad} | {10: long_line[:4096]}
    return [(source, f"line {n}", reason, raws[n], "SearchQuery") for n, reason in bad]


def matches_dead_letters(expected: list[tuple]):
    """Like equal_to, but an expected reason may be a prefix of the actual one
    (the JSON decoder's wording after it is not ours)."""

    def check(actual):
        actual = sorted(actual, key=lambda d: int(d[1].split()[1]))
        assert len(actual) == len(expected), actual
        for got, want in zip(actual, expected, strict=True):
            assert got[:2] == want[:2]
            assert got[2].startswith(want[2]), (got[2], want[2])
            assert got[3:] == want[3:]

    return check


@pytest.fixture
def mixed_file(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(MIXED_LINES))  # no final newline on purpose
    return str(path)


def test_mixed_jsonl_splits_every_bad_line_into_dead_letters(mixed_file):
    with test_pipeline.TestPipeline() as p:
        out = p | ReadSearchQueries(mixed_file, max_line_bytes=1000)

        assert_that(out[RECORDS], equal_to(MIXED_RECORDS), label="Records")
        assert_that(
            letters(out),
            matches_dead_letters(mixed_dead_letters(mixed_file)),
            label="DeadLetters",
        )


def test_mixed_jsonl_counts_everything_and_loses_nothing(mixed_file):
    p = beam.Pipeline()
    _ = p | ReadSearchQueries(mixed_file, max_line_bytes=1000)
    result = p.run()
    result.wait_until_finish()

    got = counters(result)

    assert got == {
        "records_read": 2,
        "blank_lines": 2,
        "dead_letters": 11,
        "dead_letter_invalid_json": 1,
        "dead_letter_not_an_object": 2,
        "dead_letter_invalid_field": 6,
        "dead_letter_oversized": 1,
        "dead_letter_invalid_utf8": 1,
    }
    non_blank = sum(1 for line in MIXED_LINES if line.strip())
    assert got["records_read"] + got["dead_letters"] == non_blank


def test_csv_files_each_use_their_own_header(tmp_path):
    (tmp_path / "a.csv").write_bytes(
        b"query,event_time,count\n"
        b'"hello, world",1700000000000,3\n'
        b"plain,2024-01-01T00:00:00Z,\n"
        b"short,1700000000000\n"
    )
    (tmp_path / "b.csv").write_bytes(
        b"record_id, query ,event_time\r\n"
        b"r1,second file,1700000000001\r\n"
        b"\r\n"
        b'r2,"say ""hi""",1700000000002\r\n'
        b",no time,notatime"
    )
    a, b = str(tmp_path / "a.csv"), str(tmp_path / "b.csv")

    with test_pipeline.TestPipeline() as p:
        out = p | ReadSearchQueries(str(tmp_path / "*.csv"))

        assert_that(
            out[RECORDS],
            equal_to(
                [
                    SearchQuery(query="hello, world", event_time=T, count=3),
                    SearchQuery(query="plain", event_time=NEW_YEAR_2024),
                    SearchQuery(query="second file", event_time=T + 1, record_id="r1"),
                    SearchQuery(query='say "hi"', event_time=T + 2, record_id="r2"),
                ]
            ),
            label="Records",
        )
        assert_that(
            letters(out),
            equal_to(
                [
                    (
                        a,
                        "line 4",
                        "CSV row has 2 columns, the header has 3",
                        b"short,1700000000000",
                        "SearchQuery",
                    ),
                    (
                        b,
                        "line 5",
                        "field 'event_time' must be epoch milliseconds or an "
                        "ISO-8601 timestamp, got 'notatime'",
                        b",no time,notatime",
                        "SearchQuery",
                    ),
                ]
            ),
            label="DeadLetters",
        )


def test_csv_bad_header_and_bad_quoting_become_dead_letters(tmp_path):
    dup = tmp_path / "dup.csv"
    dup.write_bytes(b"\nquery,query,event_time\nx,y,1700000000000\n")
    quotes = tmp_path / "quotes.csv"
    quotes.write_bytes(
        b'query,event_time\n"open,1700000000000\nrest",1\nok,1700000000000\n'
    )

    with test_pipeline.TestPipeline() as p:
        out = p | ReadRecords(str(tmp_path / "*.csv"), parse_search_query, SearchQuery)

        assert_that(
            out[RECORDS], equal_to([SearchQuery(query="ok", event_time=T)]), "Records"
        )
        assert_that(
            letters(out),
            equal_to(
                [
                    (
                        str(dup),
                        "line 2",
                        "bad CSV header: CSV header repeats column 'query'",
                        b"query,query,event_time",
                        "SearchQuery",
                    ),
                    (
                        str(dup),
                        "line 3",
                        "no usable CSV header: line 2 was rejected",
                        b"x,y,1700000000000",
                        "SearchQuery",
                    ),
                    (
                        str(quotes),
                        "line 2",
                        "invalid CSV: a quoted field is still open at the end "
                        "of the line (quoted fields may not hold line breaks)",
                        b'"open,1700000000000',
                        "SearchQuery",
                    ),
                    (
                        str(quotes),
                        "line 3",
                        "invalid CSV: continues the quoted field left open on "
                        "line 2 (quoted fields may not hold line breaks)",
                        b'rest",1',
                        "SearchQuery",
                    ),
                ]
            ),
            label="DeadLetters",
        )


def test_parquet_rows_with_timestamp_and_integer_times(tmp_path):
    stamps = [dt.datetime(2024, 1, 1, 0, 0, s, tzinfo=dt.UTC) for s in (0, 1, 2)]
    pq.write_table(
        pa.table(
            {
                "query": ["a", "b", "c"],
                "event_time": pa.array(stamps, pa.timestamp("ms", tz="UTC")),
                "count": pa.array([1, None, -3], pa.int64()),
                "record_id": ["r1", None, "r3"],
            }
        ),
        tmp_path / "stamped.parquet",
    )
    pq.write_table(
        pa.table({"event_time": pa.array([T], pa.int64()), "query": ["int time"]}),
        tmp_path / "ints.parquet",
    )
    (tmp_path / "junk.parquet").write_bytes(b"this is not parquet")

    with test_pipeline.TestPipeline() as p:
        out = p | ReadSearchQueries(str(tmp_path / "*.parquet"))

        assert_that(
            out[RECORDS],
            equal_to(
                [
                    SearchQuery(
                        query="a", event_time=NEW_YEAR_2024, count=1, record_id="r1"
                    ),
                    SearchQuery(query="b", event_time=NEW_YEAR_2024 + 1000),
                    SearchQuery(query="int time", event_time=T),
                ]
            ),
            label="Records",
        )
        assert_that(
            letters(out) | beam.Map(lambda d: d[:2] + (d[2][:30], d[3])),
            equal_to(
                [
                    (
                        str(tmp_path / "stamped.parquet"),
                        "row 3",
                        "field 'count' must be a non-ne",
                        b'{"query": "c", "event_time": "2024-01-01 00:00:02+00:00", '
                        b'"count": -3, "record_id": "r3"}',
                    ),
                    (
                        str(tmp_path / "junk.parquet"),
                        "row 1",
                        "unreadable file: Parquet magic",
                        b"",
                    ),
                ]
            ),
            label="DeadLetters",
        )


def test_parquet_row_groups_are_read_apart_and_keep_file_row_numbers(tmp_path):
    queries = [f"q{i}" for i in range(10)]
    counts = [1] * 10
    counts[6] = -1  # row 7 of the file, in the third row group of three rows
    path = tmp_path / "groups.parquet"
    pq.write_table(
        pa.table({"query": queries, "event_time": [T] * 10, "count": counts}),
        path,
        row_group_size=3,
    )
    assert pq.ParquetFile(path).metadata.num_row_groups == 4

    p = beam.Pipeline()
    out = p | ReadSearchQueries(str(path))
    assert_that(
        out[RECORDS] | beam.Map(lambda r: r.query),
        equal_to([q for q in queries if q != "q6"]),
        label="Records",
    )
    assert_that(
        letters(out) | beam.Map(lambda d: d[1]), equal_to(["row 7"]), label="Dead"
    )
    result = p.run()
    result.wait_until_finish()
    assert counters(result)["records_read"] == 9


def test_gzipped_jsonl_is_decompressed_and_a_corrupt_gz_is_a_dead_letter(tmp_path):
    good = tmp_path / "events.jsonl.gz"
    good.write_bytes(
        gzip.compress(
            b'{"query": "zipped", "event_time": 1700000000000}\n'
            b'{"query": "zipped", "event_time": 1700000000001, "count":-1}\n'
        )
    )
    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(b'{"query": "plain text, not gzip"}\n')

    with test_pipeline.TestPipeline() as p:
        out = p | ReadSearchQueries(str(tmp_path / "*.jsonl.gz"))

        assert_that(
            out[RECORDS],
            equal_to([SearchQuery(query="zipped", event_time=T)]),
            label="Records",
        )
        assert_that(
            letters(out) | beam.Map(lambda d: d[:2] + (d[2][:17], d[3])),
            equal_to(
                [
                    (
                        str(good),
                        "line 2",
                        "field 'count' mus",
                        b'{"query": "zipped", "event_time": 1700000000001, "count":-1}',
                    ),
                    (str(corrupt), "line 1", "unreadable file a", b""),
                ]
            ),
            label="DeadLetters",
        )


def test_photon_readers(tmp_path):
    queries = tmp_path / "queries.ndjson"
    queries.write_text(
        json.dumps({"query_id": "q1", "event_time": T, "ad_id": "ad1"})
        + "\n"
        + json.dumps({"event_time": T})
        + "\n"
    )
    clicks = tmp_path / "clicks.csv"
    clicks.write_text(
        "click_id,query_id,event_time,ad_id\nc1,q1,1700000000500,ad1\nc2,,1700000000600,\n"
    )

    with test_pipeline.TestPipeline() as p:
        q = p | "Q" >> ReadQueryEvents(str(queries))
        c = p | "C" >> ReadClickEvents(str(clicks))

        assert_that(
            q[RECORDS],
            equal_to([QueryEvent(query_id="q1", event_time=T, ad_id="ad1")]),
            label="Queries",
        )
        assert_that(
            letters(q, "QL"),
            equal_to(
                [
                    (
                        str(queries),
                        "line 2",
                        "missing field 'query_id'",
                        b'{"event_time": 1700000000000}',
                        "QueryEvent",
                    )
                ]
            ),
            label="QueryLetters",
        )
        assert_that(
            c[RECORDS],
            equal_to(
                [
                    ClickEvent(
                        click_id="c1", query_id="q1", event_time=T + 500, ad_id="ad1"
                    )
                ]
            ),
            label="Clicks",
        )
        assert_that(
            letters(c, "CL"),
            equal_to(
                [
                    (
                        str(clicks),
                        "line 3",
                        "field 'query_id' must be a non-empty string",
                        b"c2,,1700000000600,",
                        "ClickEvent",
                    )
                ]
            ),
            label="ClickLetters",
        )


# Per record type: its reader, its CSV columns (the required ones first),
# and the text of a row after its first field.
CSV_TYPES = {
    "SearchQuery": (ReadSearchQueries, ["query", "event_time", "record_id", "count"],
                    "1700000000000,r1,1"),
    "QueryEvent": (ReadQueryEvents, ["query_id", "event_time"], "1700000000000"),
    "ClickEvent": (ReadClickEvents, ["click_id", "query_id", "event_time"],
                   "q-1,1700000000000"),
}  # fmt: skip
REQUIRED = {
    "SearchQuery": ["query", "event_time"],
    "QueryEvent": ["query_id", "event_time"],
    "ClickEvent": ["click_id", "query_id", "event_time"],
}


def _read_csv(reader, path):
    """A pipeline reading `path`: (first field of each record, dead
    letters as `letters` gives them); run it to check them."""
    p = beam.Pipeline()
    out = p | reader(str(path))
    first = out[RECORDS] | beam.Map(lambda m: getattr(m, m.ListFields()[0][0].name))
    return p, first, letters(out)


def _run(p) -> dict[str, int]:
    result = p.run()
    result.wait_until_finish()
    return counters(result)


@pytest.mark.parametrize("record_type", list(CSV_TYPES))
@pytest.mark.parametrize("header", ["none", "other case", "semicolons", "partial"])
def test_a_csv_file_without_its_header_loses_no_line(tmp_path, record_type, header):
    reader, columns, rest = CSV_TYPES[record_type]
    missing = REQUIRED[record_type]
    first_line = {
        "other case": ",".join(name.title() for name in columns),
        "semicolons": ";".join(columns),
        "partial": ",".join(columns).replace("event_time", "time"),
    }.get(header)
    if header == "partial":
        missing = ["event_time"]
    rows = [f"a-{i},{rest}" for i in range(3)]
    lines = [first_line, *rows] if first_line else rows
    path = tmp_path / "in.csv"
    path.write_text("".join(line + "\n" for line in lines))
    names = ", ".join(repr(name) for name in missing)

    p, records, dead = _read_csv(reader, path)
    assert_that(records, equal_to([]), label="Records")
    expected = [
        (
            str(path),
            "line 1",
            f"bad CSV header: CSV header lacks the required column(s) {names}: "
            "is the header missing?",
            lines[0].encode(),
            record_type,
        )
    ] + [
        (
            str(path),
            f"line {n}",
            "no usable CSV header: line 1 was rejected",
            line.encode(),
            record_type,
        )
        for n, line in enumerate(lines[1:], 2)
    ]
    assert_that(dead, equal_to(expected), label="Dead")

    # Every line is accounted for, and counted.
    assert _run(p) == {"dead_letters": len(lines), "dead_letter_csv_header": len(lines)}


@pytest.mark.parametrize("record_type", list(CSV_TYPES))
def test_csv_lines_continuing_an_open_quoted_field_are_dead_letters(
    tmp_path, record_type
):
    reader, columns, rest = CSV_TYPES[record_type]
    firsts = ["before", '"multi\nline"', '"say ""hi"""', '"three\nline\nrecord"']
    lines = [
        ",".join(columns),
        *(f"{first},{rest}" for first in firsts),
        "after," + rest,
    ]
    path = tmp_path / "in.csv"
    path.write_text("\n".join(lines) + "\n")
    raw = path.read_bytes().splitlines()

    p, records, dead = _read_csv(reader, path)
    assert_that(records, equal_to(["before", 'say "hi"', "after"]), label="Records")

    def letter(n, reason):
        return (str(path), f"line {n}", reason, raw[n - 1], record_type)

    left_open = (
        "invalid CSV: a quoted field is still open at the end of the line "
        "(quoted fields may not hold line breaks)"
    )
    continues = (
        "invalid CSV: continues the quoted field left open on line {} "
        "(quoted fields may not hold line breaks)"
    )
    expected = [
        letter(3, left_open),
        letter(4, continues.format(3)),
        letter(6, left_open),
        letter(7, continues.format(6)),
        letter(8, continues.format(6)),
    ]
    assert_that(dead, equal_to(expected), label="Dead")

    assert _run(p) == {
        "records_read": 3,
        "dead_letters": 5,
        "dead_letter_invalid_csv": 5,
    }


@pytest.mark.parametrize(
    ("pattern", "fmt"),
    [
        ("in/a.jsonl", "jsonl"),
        ("in/*.json", "jsonl"),
        ("in/*.NDJSON", "jsonl"),
        ("gs://bucket/*.jsonl.gz", "jsonl"),
        ("in/a.csv", "csv"),
        ("in/a.csv.bz2", "csv"),
        ("in/part-*.parquet", "parquet"),
    ],
)
def test_infer_format_from_the_extension(pattern, fmt):
    assert infer_format(pattern) == fmt


@pytest.mark.parametrize("pattern", ["in/a.txt", "in/*", "in/data.gz", "in.d/part"])
def test_infer_format_refuses_unknown_extensions(pattern):
    with pytest.raises(ValueError, match="cannot infer the record format"):
        infer_format(pattern)


def test_read_records_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown record format 'xml'"):
        ReadSearchQueries("a.jsonl", format="xml")
    with pytest.raises(ValueError, match="max_line_bytes must be positive, got 0"):
        ReadSearchQueries("a.jsonl", max_line_bytes=0)


def test_outputs_are_typed_so_their_proto_coders_are_used():
    p = beam.Pipeline()
    out = p | ReadSearchQueries("unused/*.jsonl")

    records_coder = beam.coders.registry.get_coder(out[RECORDS].element_type)
    letters_coder = beam.coders.registry.get_coder(out[DEAD_LETTERS].element_type)

    assert records_coder == beam.coders.ProtoCoder(SearchQuery)
    assert letters_coder == beam.coders.ProtoCoder(DeadLetter)

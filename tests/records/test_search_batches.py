"""ReadSearchBatches: the columnar reader gives what ReadSearchQueries gives.

Every file here mixes rows the vectorised checks clear with rows only the
per-row parser can judge; the two readers must agree on every valid search,
every dead letter (reason, row number, raw form) and every counter.
"""

import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import BeamAssertException, assert_that

from tests.records.reader_outputs import counters, letters, search_tuple
from transforms.records.readers import RECORDS, ReadSearchQueries
from transforms.records.search_batches import ReadSearchBatches
from transforms.records.search_screen import PYTHON_WHITESPACE, SEARCH_SCHEMA, screen

T = 1700000000000
MS_2100 = 4102444800000


def _invalid_utf8(texts: list[bytes]) -> pa.Array:
    """A string array holding bytes that are not UTF-8, as a careless
    Parquet writer can store them (pyarrow itself refuses to build one)."""
    offsets = np.cumsum([0] + [len(t) for t in texts]).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(),
        len(texts),
        [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(texts))],
    )


def _files(folder) -> None:
    """Parquet files with every kind of row, several row groups each."""
    n = 12
    pq.write_table(
        pa.table(
            {
                "query": [
                    "good",
                    "  padded  ",
                    None,
                    "",
                    " \t",
                    "\u3000\u2028",
                    "x" * 1024,
                    "x" * 1025,
                    "caf\u00e9",
                    "neg",
                    "old",
                    "late",
                ],
                "event_time": [T, T, T, T, T, T, T + 1, T, T, T, 1, MS_2100 + 1],
                "count": [None, 3, 1, 1, 1, 1, 0, 1, 2**40, -3, 1, 1],
                "record_id": [
                    "r1",
                    "",
                    None,
                    "r4",
                    None,
                    None,
                    None,
                    None,
                    "r9",
                    None,
                    None,
                    None,
                ],
                "extra": [1.5] * n,
            }
        ),
        folder / "ints.parquet",
        row_group_size=5,
    )
    stamps = pa.array(
        [T * 1_000_000, T * 1_000_000 + 1, None, T * 1_000_000 + 1000],
        pa.timestamp("ns"),
    )
    pq.write_table(
        pa.table({"query": ["a", "b", "c", "d"], "event_time": stamps}),
        folder / "nanos.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "query": ["s", "s", "s"],
                "event_time": pa.array(
                    [T // 1000, 5, 10**15], pa.timestamp("s", "UTC")
                ),
                "count": pa.array([1, 2, 3], pa.uint64()),
            }
        ),
        folder / "seconds.parquet",
    )
    # Unsigned values past int64's range, each in a row group with a good row.
    big = 2**64 - 1
    pq.write_table(
        pa.table(
            {
                "query": ["w"] * 4,
                "event_time": pa.array([T, T, big, T], pa.uint64()),
                "count": pa.array([1, big, 2, 3], pa.uint64()),
            }
        ),
        folder / "unsigned.parquet",
        row_group_size=2,
    )
    # Types only the per-row parser handles: text times, float counts.
    pq.write_table(
        pa.table(
            {
                "query": ["t", "t", "t"],
                "event_time": ["2024-01-01T00:00:00Z", "1700000000000", "soon"],
                "count": [1.0, 2.5, 3.0],
            }
        ),
        folder / "texts.parquet",
    )
    # A column the parser ignores, holding a time Python cannot represent.
    far = pa.array([T * 1000, 2**62], pa.timestamp("us"))
    pq.write_table(
        pa.table({"query": ["u", "v"], "event_time": [T, T], "seen": far}),
        folder / "far.parquet",
    )
    pq.write_table(
        pa.table({"query": _invalid_utf8([b"ok", b"ok\xff"]), "event_time": [T, T]}),
        folder / "bytes.parquet",
    )
    pq.write_table(pa.table({"event_time": [T]}), folder / "no_query.parquet")
    (folder / "junk.parquet").write_bytes(b"this is not parquet")


def _table_rows(table):
    return [tuple(row.values()) for row in table.to_pylist()]


def _read(pipeline, read, pattern):
    """(searches as tuples, dead letters as tuples) of one reader."""
    out = pipeline | read.__name__ >> read(pattern)
    if read is ReadSearchBatches:
        searches = out[RECORDS] | "Rows" + read.__name__ >> beam.FlatMap(_table_rows)
    else:
        searches = out[RECORDS] | "Rows" + read.__name__ >> beam.Map(search_tuple)
    return searches, letters(out, "Letters" + read.__name__)


def _same_as_per_row(tagged):
    """Matcher: what the columnar reader gave equals the per-row reader's."""
    per_row = sorted((v for tag, v in tagged if tag == "row"), key=repr)
    columnar = sorted((v for tag, v in tagged if tag == "columnar"), key=repr)
    if not per_row or per_row != columnar:
        raise BeamAssertException(f"per row {per_row}\ncolumnar {columnar}")


def _tagged(pipeline_outputs, label):
    return [
        pcoll | f"{label}{tag}" >> beam.Map(lambda v, tag=tag: (tag, v))
        for tag, pcoll in pipeline_outputs
    ]


def test_python_whitespace_is_every_code_point_isspace_accepts():
    expected = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    assert expected == PYTHON_WHITESPACE


def test_both_readers_agree_on_every_search_and_dead_letter(tmp_path):
    _files(tmp_path)
    pattern = str(tmp_path / "*.parquet")
    p = beam.Pipeline()
    row_searches, row_letters = _read(p, ReadSearchQueries, pattern)
    col_searches, col_letters = _read(p, ReadSearchBatches, pattern)
    searches = [("row", row_searches), ("columnar", col_searches)]
    dead = [("row", row_letters), ("columnar", col_letters)]
    assert_that(
        _tagged(searches, "S") | "FlatS" >> beam.Flatten(),
        _same_as_per_row,
        label="Searches",
    )
    assert_that(
        _tagged(dead, "D") | "FlatD" >> beam.Flatten(),
        _same_as_per_row,
        label="DeadLetters",
    )
    p.run().wait_until_finish()


def test_both_readers_count_the_same(tmp_path):
    _files(tmp_path)
    pattern = str(tmp_path / "*.parquet")
    totals = []
    for read in (ReadSearchQueries, ReadSearchBatches):
        p = beam.Pipeline()
        p | read(pattern)
        result = p.run()
        result.wait_until_finish()
        totals.append(counters(result))
    assert totals[0]["dead_letters"] >= 15  # every file has bad rows
    assert totals[1] == totals[0]


def test_clean_batches_are_cleared_without_the_per_row_path():
    batch = pa.RecordBatch.from_pydict(
        {
            "query": ["a", "b", "  c  "],
            "event_time": [T, T + 1, T + 2],
            "count": [1, None, 0],
            "record_id": ["x", "", None],
        }
    )
    screened = screen(batch)
    assert screened.suspects.tolist() == []
    assert screened.searches.schema == SEARCH_SCHEMA
    assert screened.searches.to_pylist() == [
        {"query": "a", "event_time": T, "count": 1, "record_id": "x"},
        {"query": "b", "event_time": T + 1, "count": None, "record_id": None},
        {"query": "  c  ", "event_time": T + 2, "count": 0, "record_id": None},
    ]


def test_unsigned_values_past_int64_are_suspects_not_a_failed_batch():
    big = 2**64 - 1
    batch = pa.RecordBatch.from_pydict(
        {
            "query": ["a", "b", "c"],
            "event_time": pa.array([T, big, T], pa.uint64()),
            "count": pa.array([big, 2, 3], pa.uint64()),
        }
    )
    screened = screen(batch)
    assert screened.suspects.tolist() == [0, 1]
    assert screened.searches.to_pylist() == [
        {"query": "c", "event_time": T, "count": 3, "record_id": None}
    ]


def test_microsecond_and_second_timestamps_become_milliseconds():
    batch = pa.RecordBatch.from_pydict(
        {
            "query": ["a", "b"],
            "event_time": pa.array([T * 1000 + 999, T * 1000], pa.timestamp("us")),
        }
    )
    screened = screen(batch)
    assert screened.suspects.tolist() == []
    assert screened.searches.column("event_time").to_pylist() == [T, T]


def test_unknown_formats_are_refused():
    with pytest.raises(ValueError, match="cannot infer the record format"):
        ReadSearchBatches("logs/*.txt")

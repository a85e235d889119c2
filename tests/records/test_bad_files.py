"""Damaged files lose no record silently: what cannot be read is a dead letter.

Real files on disk, read through the real Beam transforms on the DirectRunner.
"""

import bz2
import concurrent.futures
import gzip
import json
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.records.readers import (
    DEAD_LETTERS,
    RECORDS,
    ReadClickEvents,
    ReadSearchQueries,
)
from transforms.records.search_batches import ReadSearchBatches

T = 1_700_000_000_000


def click_lines(n):
    return b"".join(
        json.dumps({"click_id": f"c{i}", "query_id": "q", "event_time": T + i}).encode()
        + b"\n"
        for i in range(n)
    )


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".gz", gzip.compress), (".bz2", lambda data: bz2.compress(data, 1))],
)
def test_a_truncated_compressed_file_is_unreadable_after_its_last_whole_line(
    tmp_path, suffix, compress
):
    data = click_lines(20_000)
    whole = compress(data)
    path = tmp_path / f"clicks.jsonl{suffix}"
    path.write_bytes(whole[: len(whole) // 2])
    # What the cut leaves readable, by Python's own decompressor.
    reader = gzip.GzipFile if suffix == ".gz" else bz2.BZ2File
    readable = b""
    with reader(path) as fh:
        try:
            while chunk := fh.read1(1 << 16):
                readable += chunk
        except EOFError:
            pass
    complete = readable[: readable.rindex(b"\n") + 1].count(b"\n")
    assert 0 < complete < 20_000

    with test_pipeline.TestPipeline() as p:
        out = p | ReadClickEvents(str(path))
        ids = out[RECORDS] | "Ids" >> beam.Map(lambda c: c.click_id)
        dead = out[DEAD_LETTERS] | "Dead" >> beam.Map(
            lambda d: (d.source, d.reason.split(" line ")[0], "ends early" in d.reason)
        )
        # Records are those of the lines the cut left whole, up to the
        # decompressor's last full block; none is invented, none is lost.
        assert_that(
            ids | beam.combiners.Count.Globally(),
            lambda counts: _at_least_lines(counts, complete),
            label="Count",
        )
        assert_that(
            dead,
            equal_to([(str(path), "unreadable file after", True)]),
            label="OneUnreadable",
        )


def _at_least_lines(counts, complete):
    # The stream is read up to the last byte that decompresses, which may be
    # a little short of what Python's reader returns, never beyond it.
    [count] = counts
    assert complete - 2_000 <= count <= complete, (count, complete)


def test_the_unreadable_letter_says_where_and_how_far(tmp_path):
    whole = gzip.compress(click_lines(5_000))
    path = tmp_path / "clicks.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with test_pipeline.TestPipeline() as p:
        out = p | ReadClickEvents(str(path))
        count = out[RECORDS] | beam.combiners.Count.Globally()
        dead = out[DEAD_LETTERS] | beam.Map(lambda d: (d.location, d.reason))
        both = (
            count | "TagCount" >> beam.Map(lambda n: ("records", n)),
            dead | "TagDead" >> beam.Map(lambda d: ("dead", d)),
        ) | beam.Flatten()

        def check(tagged):
            found = dict(tagged)
            records, (location, reason) = found["records"], found["dead"]
            assert len(tagged) == 2, tagged
            assert records > 0
            assert location == f"line {records + 1}"
            assert f"unreadable file after line {records}:" in reason
            assert "gzip stream ends early" in reason
            assert f"after {len(whole) // 2:,} compressed bytes" in reason

        assert_that(both, check)


def test_parquet_timestamps_python_cannot_hold_are_dead_letters(tmp_path):
    ns = pa.timestamp("ns")
    table = pa.table(
        {
            "click_id": ["ok1", "sub_us", "ok2", "year_10000", "before_year_1"],
            "query_id": ["q"] * 5,
            "event_time": pa.array(
                [T * 10**6, T * 10**6 + 1, (T + 1) * 10**6, 0, 0], type=ns
            ),
        }
    )
    pq.write_table(table.slice(0, 3), tmp_path / "ns.parquet")
    seconds = pa.table(
        {
            "click_id": ["year_10000", "before_year_1", "ok3"],
            "query_id": ["q"] * 3,
            "event_time": pa.array(
                [300_000_000_000, -100_000_000_000, T // 1000], type=pa.timestamp("s")
            ),
        }
    )
    pq.write_table(seconds, tmp_path / "s.parquet")

    with test_pipeline.TestPipeline() as p:
        out = p | ReadClickEvents(str(tmp_path / "*.parquet"))
        ids = out[RECORDS] | "Ids" >> beam.Map(lambda c: c.click_id)
        dead = out[DEAD_LETTERS] | "Dead" >> beam.Map(
            lambda d: (d.source.rsplit("/", 1)[1], d.location, json.loads(d.raw))
        )
        reasons = out[DEAD_LETTERS] | "Reasons" >> beam.Map(lambda d: d.reason)
        assert_that(ids, equal_to(["ok1", "ok2", "ok3"]), label="Ids")
        assert_that(
            dead,
            equal_to(
                [
                    (
                        "ns.parquet",
                        "row 2",
                        {
                            "click_id": "sub_us",
                            "query_id": "q",
                            "event_time": T * 10**6 + 1,
                        },
                    ),
                    (
                        "s.parquet",
                        "row 1",
                        {
                            "click_id": "year_10000",
                            "query_id": "q",
                            # Parquet stores seconds as milliseconds.
                            "event_time": 300_000_000_000_000,
                        },
                    ),
                    (
                        "s.parquet",
                        "row 2",
                        {
                            "click_id": "before_year_1",
                            "query_id": "q",
                            "event_time": -100_000_000_000_000,
                        },
                    ),
                ]
            ),
            label="Dead",
        )
        assert_that(
            reasons | beam.Map(lambda r: r.split(" has ")[1].split(")")[0]),
            equal_to(
                [
                    "a value Python cannot represent (sub-microsecond precision",
                    "a value Python cannot represent (out of range",
                    "a value Python cannot represent (out of range",
                ]
            ),
            label="Reasons",
        )


@pytest.mark.parametrize("columnar", [False, True], ids=["per_record", "columnar"])
def test_a_parquet_file_compressed_whole_is_one_unreadable_letter(tmp_path, columnar):
    # Before, the gzip stream could not seek to the footer, and the job
    # failed with "I/O operation on closed file".
    table = pa.table({"query": ["a", "b"], "event_time": [T, T], "count": [1, 1]})
    plain = tmp_path / "searches.parquet"
    pq.write_table(table, plain)
    path = tmp_path / "searches.parquet.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    read = ReadSearchBatches if columnar else ReadSearchQueries
    with test_pipeline.TestPipeline() as p:
        out = p | read(str(path))
        assert_that(
            out[RECORDS] | beam.combiners.Count.Globally(),
            equal_to([0]),
            label="NoRecord",
        )
        assert_that(
            out[DEAD_LETTERS] | beam.Map(lambda d: (d.source, d.reason)),
            lambda letters: _says_decompress(letters, str(path)),
            label="OneLetter",
        )


def _says_decompress(letters, source):
    [(where, reason)] = letters
    assert where == source
    assert reason.startswith("unreadable file:"), reason
    assert "compressed whole cannot be read, decompress it" in reason, reason


@pytest.mark.parametrize("columnar", [False, True], ids=["per_record", "columnar"])
def test_an_unreadable_row_group_is_one_letter_naming_its_rows(tmp_path, columnar):
    # Five row groups of 1,000; the third's first page header is overwritten.
    rows = 5_000
    table = pa.table(
        {
            "query": [f"q{i % 7}" for i in range(rows)],
            "event_time": [T + i for i in range(rows)],
            "count": [1] * rows,
        }
    )
    path = tmp_path / "searches.parquet"
    pq.write_table(table, path, row_group_size=1_000, compression="NONE")
    offset = pq.ParquetFile(path).metadata.row_group(2).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset : offset + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))
    read = ReadSearchBatches if columnar else ReadSearchQueries
    pipeline = test_pipeline.TestPipeline()
    out = pipeline | read(str(path))
    if columnar:
        counted = (
            out[RECORDS] | beam.Map(lambda t: t.num_rows) | beam.CombineGlobally(sum)
        )
    else:
        counted = out[RECORDS] | beam.combiners.Count.Globally()
    assert_that(counted, equal_to([4_000]), label="Read")
    assert_that(
        out[DEAD_LETTERS] | beam.Map(lambda d: (d.location, d.reason.split(": ")[1])),
        equal_to(
            [("row 2001", "row group 3 (rows 2001 to 3000, 1000 rows) cannot be read")]
        ),
        label="OneLetter",
    )
    result = pipeline.run()
    result.wait_until_finish()
    metric = MetricsFilter().with_name("rows_unreadable")
    [unreadable] = result.metrics().query(metric)["counters"]
    assert unreadable.committed == 1_000


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("columnar", [False, True], ids=["per_record", "columnar"])
def test_what_a_glob_matches_but_cannot_read_is_counted(tmp_path, columnar, suffix):
    # Before, Beam's match left out both without a word: the dangling link
    # was no dead letter and the directory no count.
    good = tmp_path / f"good{suffix}"
    table = pa.table({"query": ["a"], "event_time": [T]})
    if suffix == ".parquet":
        pq.write_table(table, good)
    elif suffix == ".csv":
        good.write_text(f"query,event_time\na,{T}\n")
    else:
        good.write_text(json.dumps({"query": "a", "event_time": T}) + "\n")
    dangling = tmp_path / f"dangling{suffix}"
    dangling.symlink_to(tmp_path / "gone")
    (tmp_path / f"sub{suffix}").mkdir()
    read = ReadSearchBatches if columnar else ReadSearchQueries
    pipeline = test_pipeline.TestPipeline()
    out = pipeline | read(str(tmp_path / f"*{suffix}"))
    assert_that(
        out[DEAD_LETTERS] | beam.Map(lambda d: (d.source, "No such file" in d.reason)),
        equal_to([(str(dangling), True)]),
        label="OneLetter",
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter())["counters"]
    }
    assert counters["records_read"] == 1
    assert counters["dead_letter_unreadable_file"] == 1
    assert counters["directories_skipped"] == 1


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("columnar", [False, True], ids=["per_record", "columnar"])
def test_a_field_given_twice_is_a_dead_letter_in_every_format(
    tmp_path, columnar, suffix
):
    # A CSV header naming a column twice was refused, while a JSON object
    # naming a key twice, and a Parquet file with two columns of one name,
    # kept the last value without a word.
    path = tmp_path / f"twice{suffix}"
    if suffix == ".parquet":
        columns = [pa.array(["a"]), pa.array([T]), pa.array(["b"])]
        names = ["query", "event_time", "query"]
        pq.write_table(pa.Table.from_arrays(columns, names), path)
    elif suffix == ".csv":
        path.write_text(f"query,event_time,query\na,{T},b\n")
    else:
        path.write_text(f'{{"query": "a", "event_time": {T}, "query": "b"}}\n')
    read = ReadSearchBatches if columnar else ReadSearchQueries
    with test_pipeline.TestPipeline() as pipeline:
        out = pipeline | read(str(path))
        assert_that(out[RECORDS], equal_to([]), label="NoRecord")
        # CSV refuses the header, and so its row, which has no usable one.
        named = [True, False] if suffix == ".csv" else [True]
        assert_that(
            out[DEAD_LETTERS] | beam.Map(lambda d: "'query'" in d.reason),
            equal_to(named),
            label="LettersNamingTheField",
        )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("columnar", [False, True], ids=["per_record", "columnar"])
def test_a_fifo_the_pattern_matches_is_a_dead_letter_not_a_hang(
    tmp_path, columnar, suffix
):
    # Opened as a file, a FIFO waits for a writer, and the job with it, for
    # ever if none comes; Parquet's reader still opened it.
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    read = ReadSearchBatches if columnar else ReadSearchQueries
    pipeline = test_pipeline.TestPipeline()
    out = pipeline | read(str(tmp_path / f"*{suffix}"))
    assert_that(
        out[DEAD_LETTERS] | beam.Map(lambda d: "is a FIFO (named pipe)" in d.reason),
        equal_to([True]),
    )
    jobs = concurrent.futures.ThreadPoolExecutor(1)
    job = jobs.submit(lambda: pipeline.run().wait_until_finish())
    try:
        job.result(timeout=60)
    except TimeoutError:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let it return
        raise
    finally:
        jobs.shutdown(wait=False)

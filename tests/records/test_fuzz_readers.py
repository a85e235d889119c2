"""Fuzzing the readers: malformed records and damaged files, all accounted for.

A seeded corpus (`testing.record_fuzz`, `testing.parquet_fuzz`) of JSON
Lines, CSV, gzip and Parquet files is read by the real `ReadClickEvents`
transforms on the DirectRunner, and the outputs are written by the real
JSON Lines sink and read back. The job must not fail; every good record must
come out exactly once; every malformed record must be a dead letter with a
reason, at its own line or row; every damaged file must be one
`unreadable_file` dead letter; and the dead-letter counter must count them
all. The counts are printed in the test output.
"""

import collections
import random

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter

from pipelines.outputs import read_output
from testing import record_fuzz
from testing.parquet_fuzz import write_parquet
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.photon_pb2 import ClickEvent
from transforms.records.readers import (
    DEAD_LETTERS,
    RECORDS,
    ReadClickEvents,
    WriteJsonLines,
)

SEED = 12
FORMATS = {
    "jsonl": ("*.jsonl", record_fuzz.write_jsonl),
    "csv": ("*.csv", record_fuzz.write_csv),
    "gz": ("*.jsonl.gz", record_fuzz.write_gz),
    "parquet": ("*.parquet", write_parquet),
}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """The corpus, and what one pipeline over all of it wrote."""
    root = tmp_path_factory.mktemp("fuzz")
    rng = random.Random(SEED)
    corpora = {}
    pipeline = beam.Pipeline()
    for name, (pattern, write) in FORMATS.items():
        corpora[name] = record_fuzz.Corpus()
        write(corpora[name], root / name, rng)
        read = pipeline | f"Read_{name}" >> ReadClickEvents(
            str(root / name / pattern), max_line_bytes=record_fuzz.MAX_LINE_BYTES
        )
        out = root / "out" / name
        read[RECORDS] | f"Records_{name}" >> WriteJsonLines(str(out / "records"))
        read[DEAD_LETTERS] | f"Dead_{name}" >> WriteJsonLines(str(out / "dead"))
    result = pipeline.run()
    result.wait_until_finish()
    dead_counter = sum(
        c.committed
        for c in result.metrics().query(
            MetricsFilter()
            .with_namespace("millwheel.records")
            .with_name("dead_letters")
        )["counters"]
    )
    return root, corpora, dead_counter


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_record_and_file_is_accounted_for(fuzzed, name, capsys):
    root, corpora, _ = fuzzed
    corpus = corpora[name]
    out = root / "out" / name
    records = read_output(out, "records", ClickEvent)
    letters = read_output(out, "dead", DeadLetter)

    damaged = [r for r in records if r.click_id.startswith(_corrupt(corpus))]
    ids = collections.Counter(
        r.click_id for r in records if not r.click_id.startswith(_corrupt(corpus))
    )
    owed = collections.Counter(corpus.good)
    lost = owed - ids
    duplicates = {i: n for i, n in ids.items() if n > 1}
    unexpected = set(ids) - set(owed)
    unreadable = collections.Counter(
        d.source for d in letters if d.reason.startswith("unreadable file")
    )
    located = {(d.source, d.location) for d in letters}
    with capsys.disabled():  # the counts belong in every run's output
        print(
            f"\n{name}: {corpus.bad} malformed records and files tried "
            f"({len(corpus.kinds)} kinds), {len(corpus.good)} good records; "
            f"{len(records)} records out, {len(letters)} dead letters, "
            f"{sum(unreadable.values())} unreadable files; lost {sum(lost.values())}, "
            f"duplicates {len(duplicates)}, crashes 0; {len(damaged)} records read "
            "from corrupt gzip files before the damage (not owed)"
        )
    assert corpus.bad >= 1000
    assert not lost, f"good records lost: {list(lost)[:5]}"
    assert not duplicates, f"records output twice: {list(duplicates)[:5]}"
    assert not unexpected, f"records nobody wrote: {list(unexpected)[:5]}"
    missing = corpus.dead - located
    assert not missing, f"bad records without a dead letter: {sorted(missing)[:5]}"
    assert all(d.reason and d.source for d in letters)
    assert {s: unreadable[s] for s in corpus.unreadable} == {
        s: 1 for s in corpus.unreadable
    }
    stray = {
        (d.source, d.location, d.reason[:60])
        for d in letters
        if (d.source, d.location) not in corpus.dead
        and d.source not in corpus.unreadable
    }
    assert not stray, f"dead letters for good records: {sorted(stray)[:5]}"


def test_the_dead_letter_counter_counts_every_letter(fuzzed):
    root, _, counted = fuzzed
    written = sum(
        len(read_output(root / "out" / name, "dead", DeadLetter)) for name in FORMATS
    )
    assert counted == written > 4000


def _corrupt(corpus: record_fuzz.Corpus) -> tuple[str, ...]:
    """Id prefixes of the records of gzip files damaged mid-stream."""
    return tuple(corpus.corrupt_prefixes) or ("\0",)

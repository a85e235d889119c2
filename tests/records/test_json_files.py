"""WriteJsonLineFiles: a bounded job's outputs as JSON Lines files, every
output through one sink, each line once."""

import json
import pathlib
import re

import apache_beam as beam
import pytest
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from testing import small_disk
from transforms.records.json_files import (
    LINES_PER_BLOCK,
    OutputUnwritable,
    WriteJsonLineFiles,
    _BundleWriter,
    name_files,
    part_path,
    shard_path,
)
from transforms.records.zeitgeist_pb2 import SearchQuery

T0 = 1_767_571_200_000
SHARD_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.jsonl$")


def _queries(names) -> list[SearchQuery]:
    return [SearchQuery(query=n, event_time=T0, record_id=n) for n in names]


def _written(tmp_path, name) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(tmp_path.glob(f"{name}-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def _shards(tmp_path, name) -> list[tuple[int, int]]:
    """(shard, of) of each file of the output `name`."""
    return sorted(
        tuple(map(int, SHARD_NAME.search(p.name).groups()))
        for p in tmp_path.glob(f"{name}-*")
    )


@pytest.mark.both_runners
def test_each_output_is_written_whole_under_its_prefix(tmp_path):
    # More lines than one block holds, so that a bundle writes several.
    many = [f"m{i}" for i in range(LINES_PER_BLOCK + 7)]
    with beam.Pipeline() as pipeline:
        outputs = {
            str(tmp_path / "many"): pipeline | "Many" >> beam.Create(_queries(many)),
            str(tmp_path / "few"): pipeline | "Few" >> beam.Create(_queries(["a"])),
            str(tmp_path / "none"): pipeline | "None" >> beam.Create([]),
        }
        _ = outputs | WriteJsonLineFiles()
    assert sorted(r["query"] for r in _written(tmp_path, "many")) == sorted(many)
    assert [r["query"] for r in _written(tmp_path, "few")] == ["a"]
    # An output without records still exists, as one empty file.
    assert [p.name for p in tmp_path.glob("none*")] == ["none-00000-of-00001.jsonl"]
    assert (tmp_path / "none-00000-of-00001.jsonl").read_text() == ""
    for name in ("many", "few"):
        shards = _shards(tmp_path, name)
        assert [s for s, _ in shards] == list(range(len(shards)))
        assert {of for _, of in shards} == {len(shards)}
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind


def test_files_of_an_earlier_job_under_the_prefix_are_replaced(tmp_path):
    for shard in range(3):
        (tmp_path / f"out-{shard:05d}-of-00003.jsonl").write_text('{"query": "old"}\n')
    (tmp_path / "out-notes.txt").write_text("kept")
    with beam.Pipeline() as pipeline:
        queries = pipeline | beam.Create(_queries(["new"]))
        _ = {str(tmp_path / "out"): queries} | WriteJsonLineFiles()
    assert [r["query"] for r in _written(tmp_path, "out")] == ["new"]
    assert (tmp_path / "out-notes.txt").read_text() == "kept"


def test_parts_a_streaming_job_left_under_the_prefix_are_replaced(tmp_path):
    # A batch run over a live run's output directory kept the live parts,
    # and the command's scoring read them as its own anomalies.
    for shard, part in [(0, 0), (0, 1), (3, 12)]:
        pathlib.Path(part_path(str(tmp_path / "out"), shard, part)).write_text(
            '{"query": "live"}\n'
        )
    (tmp_path / "out-notes.jsonl").write_text('{"query": "not an output part"}\n')
    with beam.Pipeline() as pipeline:
        queries = pipeline | beam.Create(_queries(["new"]))
        _ = {str(tmp_path / "out"): queries} | WriteJsonLineFiles()
    assert sorted(p.name for p in tmp_path.glob("out-*")) == [
        "out-00000-of-00001.jsonl",
        "out-notes.jsonl",
    ]
    shard = tmp_path / "out-00000-of-00001.jsonl"
    assert [json.loads(line)["query"] for line in shard.read_text().splitlines()] == [
        "new"
    ]


def _written_by_bundles(prefix, job, blocks) -> list[tuple[str, str]]:
    """What `_BundleWriter` yields for one bundle per block."""
    written = []
    for block in blocks:
        writer = _BundleWriter(prefix, job)
        writer.start_bundle()
        for message in block:
            writer.process(message)
        written.extend(value.value for value in writer.finish_bundle())
    return written


def test_the_naming_step_run_again_after_it_moved_the_files_completes(tmp_path):
    prefix = str(tmp_path / "out")
    written = _written_by_bundles(prefix, "j1", [_queries(["a"]), _queries(["b"])])
    first = name_files([prefix], "j1", written)
    again = name_files([prefix], "j1", written)
    assert first == again == [shard_path(prefix, i, 2) for i in range(2)]
    assert sorted(r["query"] for r in _written(tmp_path, "out")) == ["a", "b"]
    assert not list(tmp_path.glob(".*"))


def test_a_written_file_that_is_gone_fails_the_naming_step(tmp_path):
    prefix = str(tmp_path / "out")
    lost = [(prefix, str(tmp_path / "lost.jsonl"))]
    with pytest.raises(OSError, match="lost.jsonl is missing"):
        name_files([prefix], "j1", lost)


def test_one_pcollection_is_written_under_its_prefix(tmp_path):
    with beam.Pipeline() as pipeline:
        queries = pipeline | beam.Create(_queries(["a", "b"]))
        _ = queries | WriteJsonLineFiles(str(tmp_path / "out"))
    assert sorted(r["query"] for r in _written(tmp_path, "out")) == ["a", "b"]


def test_one_pcollection_needs_a_prefix():
    pipeline = beam.Pipeline()
    queries = pipeline | beam.Create(_queries(["a"]))
    with pytest.raises(ValueError, match="needs path_prefix"):
        _ = queries | WriteJsonLineFiles()


def test_an_unbounded_pcollection_is_refused_with_the_sink_to_use():
    pipeline = beam.Pipeline()
    endless = pipeline | PeriodicImpulse(fire_interval=1)
    with pytest.raises(
        ValueError, match="unbounded: write them with WriteJsonLineParts"
    ):
        _ = endless | WriteJsonLineFiles("out")


def test_no_output_is_refused():
    with pytest.raises(ValueError, match="at least one output"):
        WriteJsonLineFiles().expand({})


def test_shards_are_named_as_write_to_text_names_them():
    assert shard_path("/o/anomalies", 2, 13) == "/o/anomalies-00002-of-00013.jsonl"


def test_an_output_the_disk_refuses_fails_in_one_error_naming_it(small_disk_dir):
    # Before, "No space left on device" from a Spark task named no file and
    # reached the command as a traceback. A real full file system.
    disk = small_disk_dir
    small_disk.fill(disk)
    refused = (
        f"output file {disk}/.+ cannot be written "
        r"\(.*No space left on device\): the job's outputs are incomplete"
    )
    with (
        pytest.raises(OutputUnwritable, match=refused),
        beam.Pipeline() as pipeline,
    ):
        _ = {
            str(disk / "out"): pipeline | beam.Create(_queries(["a", "b"]))
        } | WriteJsonLineFiles()

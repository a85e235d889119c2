"""WriteJsonLineParts: numbered JSON Lines parts, written while a streaming
job runs and at the end of a bounded one, each line exactly once."""

import json
import os
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from pipelines.summary import counter_totals
from runners.spark import SparkRunner
from testing import small_disk
from testing.inbox import drop_file
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.json_files import OutputUnwritable, part_path
from transforms.records.json_parts import WriteJsonLineParts
from transforms.records.readers import RECORDS
from transforms.records.zeitgeist_pb2 import SearchQuery

T0 = 1_767_571_200_000


def _queries(names) -> list[SearchQuery]:
    return [SearchQuery(query=n, event_time=T0, record_id=n) for n in names]


def _written(tmp_path, prefix="out") -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(tmp_path.glob(f"{prefix}*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_a_bounded_input_is_written_whole_when_it_ends(tmp_path):
    names = [f"q{i}" for i in range(25)]
    with beam.Pipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create(_queries(names))
            | WriteJsonLineParts(str(tmp_path / "out"), shards=2)
        )
    assert sorted(r["query"] for r in _written(tmp_path)) == sorted(names)
    # Two shards, one part each: the end of the input flushed them.
    assert {p.name for p in tmp_path.glob("out*.jsonl")} == {
        "out-000-000000.jsonl",
        "out-001-000000.jsonl",
    }
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_a_part_the_disk_refuses_fails_in_one_error_naming_it(small_disk_dir):
    # Before, "No space left on device" from a Spark task named no file and
    # reached the live command as a traceback. A real full file system.
    disk = small_disk_dir
    small_disk.fill(disk)
    refused = (
        f"output file {disk}/out-000-000000.jsonl cannot be written "
        r"\(.*No space left on device\): the job resumes"
    )
    with (
        pytest.raises(OutputUnwritable, match=refused),
        beam.Pipeline() as pipeline,
    ):
        _ = (
            pipeline
            | beam.Create(_queries(["a", "b"]))
            | WriteJsonLineParts(str(disk / "out"))
        )


def test_a_part_is_on_disk_before_its_name_and_its_name_before_the_commit(
    tmp_path, monkeypatch
):
    # A power loss cannot be inflicted here, so the test watches the system
    # calls that guard against one: the part's bytes are synced before the
    # rename that names it, and its directory after, so that a batch's
    # commit (written next) never claims a part that could come back empty.
    calls = []
    fsync, rename = os.fsync, os.rename

    def watched_fsync(descriptor):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def watched_rename(source, target):
        calls.append(("rename", str(source), str(target)))
        rename(source, target)

    monkeypatch.setattr(os, "fsync", watched_fsync)
    monkeypatch.setattr(os, "rename", watched_rename)
    with beam.Pipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create(_queries(["a"]))
            | WriteJsonLineParts(str(tmp_path / "out"))
        )
    renames = [c for c in calls if c[0] == "rename"]
    assert [c[2] for c in renames] == [str(tmp_path / "out-000-000000.jsonl")]
    temporary = renames[0][1]
    assert calls.index(("fsync", temporary)) < calls.index(renames[0])
    assert calls.index(renames[0]) < calls.index(("fsync", str(tmp_path)))
    assert [r["query"] for r in _written(tmp_path)] == ["a"]


@pytest.mark.parametrize("kwargs", [{"shards": 0}, {"flush_seconds": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        WriteJsonLineParts("out", **kwargs)


def test_parts_are_numbered_per_shard():
    assert part_path("/o/anomalies", 2, 13) == "/o/anomalies-002-000013.jsonl"


@pytest.mark.spark
@pytest.mark.slow
def test_a_streaming_job_writes_a_part_per_flush_while_it_runs(tmp_path, spark_session):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    drop_file(inbox, "a.jsonl", _queries(["a1", "a2"]))
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(
            ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}"]
        ),
    )
    _ = (
        pipeline
        | FollowSearchQueries(str(inbox / "*.jsonl"), settings=FollowSettings(0.2))
    )[RECORDS] | WriteJsonLineParts(str(out / "searches"))
    result = pipeline.run()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not list(out.glob("searches*")):
            time.sleep(0.1)
        # Written while the job runs, long before its input could end.
        assert [r["query"] for r in _written(out, "searches")] in (
            ["a1", "a2"],
            ["a2", "a1"],
        )
        drop_file(inbox, "b.jsonl", _queries(["b1"]))
        while time.monotonic() < deadline and len(list(out.glob("searches*"))) < 2:
            time.sleep(0.1)
        assert (out / "searches-000-000001.jsonl").exists()
    finally:
        drop_file(inbox, "c.jsonl", _queries(["c1"]))
        assert result.drain() == PipelineState.DONE
    assert sorted(r["query"] for r in _written(out, "searches")) == [
        "a1",
        "a2",
        "b1",
        "c1",
    ]
    assert [p.name for p in sorted(out.glob("searches*"))] == [
        f"searches-000-{n:06d}.jsonl" for n in range(3)
    ]


def test_several_outputs_share_one_writer_stage_each_under_its_prefix(tmp_path):
    with beam.Pipeline() as pipeline:
        first = pipeline | "First" >> beam.Create(_queries(["a1", "a2"]))
        second = pipeline | "Second" >> beam.Create(_queries(["b1"]))
        _ = {
            str(tmp_path / "first"): first,
            str(tmp_path / "second"): second,
        } | WriteJsonLineParts()
    assert sorted(r["query"] for r in _written(tmp_path, "first")) == ["a1", "a2"]
    assert [r["query"] for r in _written(tmp_path, "second")] == ["b1"]


def test_one_pcollection_needs_a_prefix():
    pipeline = beam.Pipeline()
    queries = pipeline | beam.Create(_queries(["a"]))
    with pytest.raises(ValueError, match="needs path_prefix"):
        _ = queries | WriteJsonLineParts()


def _records_read(result) -> int:
    totals = counter_totals(result, ("millwheel.records",))
    return totals.get("millwheel.records/records_read", 0)


@pytest.mark.spark
@pytest.mark.slow
def test_with_no_delay_a_batchs_lines_are_written_before_it_commits(
    tmp_path, spark_session
):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    out.mkdir()
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(
            [
                "--streaming",
                f"--checkpoint_dir={tmp_path / 'checkpoint'}",
                # Seconds between batches: a line left for the next batch
                # would be missing for that long after its batch commits.
                "--streaming_batch_interval_seconds=3",
            ]
        ),
    )
    _ = (
        pipeline
        | FollowSearchQueries(str(inbox / "*.jsonl"), settings=FollowSettings(0.2))
    )[RECORDS] | WriteJsonLineParts(str(out / "searches"), flush_seconds=0)
    result = pipeline.run()
    try:
        for wave in (["a1", "a2"], ["b1"]):
            read_before = _records_read(result)
            drop_file(inbox, f"{wave[0]}.jsonl", _queries(wave))
            deadline = time.monotonic() + 90
            # The committed metrics count a batch's records once it commits.
            while (
                _records_read(result) < read_before + len(wave)
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            written = {r["query"] for r in _written(out, "searches")}
            assert set(wave) <= written, f"{wave} read and committed, not written"
    finally:
        result.cancel()

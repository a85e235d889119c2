"""`pipelines.live`: whether a live job resumes a checkpoint (`resumes`),
which decides whether a live generator keeps or deletes an earlier run's
files (`generator_run`) and outputs (`write_parts`), and the status line's
read rate (`read_rate`), which a resumed job's totals must not inflate; how
long a generated run's watermark waits (`live_flags.disorder_of_generated`);
and a live job stopped by its command (`run_until_stopped`'s `stop_when`)."""

import argparse
import pathlib
import threading

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from pipelines import config as config_loader
from pipelines import live_flags
from pipelines.live import (
    earlier_outputs,
    generator_run,
    read_rate,
    resumes,
    run_until_stopped,
)
from pipelines.outputs import EarlierOutputs, EarlierOutputsExist, write_parts
from pipelines.zeitgeist_flags import DEFAULT_CONFIG
from runners.spark import SparkRunner
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.json_files import part_path, shard_path
from transforms.records.readers import RECORDS


def test_a_job_without_a_checkpoint_directory_starts_afresh():
    assert not resumes(PipelineOptions(["--streaming"]))


def test_a_new_or_empty_checkpoint_directory_starts_afresh(tmp_path):
    assert not resumes(PipelineOptions([f"--checkpoint_dir={tmp_path / 'new'}"]))
    assert not resumes(PipelineOptions([f"--checkpoint_dir={tmp_path}"]))


def test_a_checkpoint_directory_a_run_wrote_to_is_resumed(tmp_path):
    (tmp_path / "job.json").write_text("{}")
    assert resumes(PipelineOptions([f"--checkpoint_dir={tmp_path}"]))


def test_the_read_rate_is_taken_between_two_status_lines():
    # A resumed job's counter holds its earlier runs' 10,000 records too.
    assert read_rate((100.0, 10_000), (130.0, 16_000)) == " (200/s)"


def test_a_resumed_generator_run_is_numbered_past_every_file_played(tmp_path):
    queries, clicks = tmp_path / "queries", tmp_path / "clicks"
    queries.mkdir()
    clicks.mkdir()
    (queries / "live-00000004.jsonl").write_text("")
    (clicks / "live-00000011.jsonl").write_text("")
    assert generator_run([queries, clicks], resume=True) == 12
    assert (queries / "live-00000004.jsonl").exists()


def test_a_fresh_generator_run_deletes_an_earlier_runs_files(tmp_path):
    (tmp_path / "live-00000003.jsonl").write_text("")
    (tmp_path / "kept.jsonl").write_text("")
    assert generator_run([tmp_path], resume=False) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["kept.jsonl"]


def parsed_live_flags(*argv):
    parser = argparse.ArgumentParser()
    live_flags.add_live_arguments(parser, follow_help="")
    config_loader.add_config_arguments(parser, DEFAULT_CONFIG)
    return parser.parse_args(argv)


def earlier_run_outputs(tmp_path):
    """An earlier live run's parts and a batch run's shard, under the name a
    live run writes, and a file whose name is not an output's."""
    earlier = [
        part_path(str(tmp_path / "anomalies"), 0, 7),
        part_path(str(tmp_path / "anomalies"), 2, 0),
        shard_path(str(tmp_path / "anomalies"), 0, 1),
    ]
    for path in earlier:
        pathlib.Path(path).write_text('{"query": "earlier"}\n')
    other = tmp_path / "anomalies-notes.jsonl"
    other.write_text("kept\n")
    return sorted(earlier), str(other)


def write_live(tmp_path, earlier):
    write = write_parts(0.0, earlier)
    write({str(tmp_path / "anomalies"): beam.Pipeline() | beam.Create(["a"])})


def left(tmp_path):
    return sorted(str(p) for p in tmp_path.glob("anomalies-*"))


@pytest.mark.parametrize("earlier", [EarlierOutputs.REPLACE, EarlierOutputs.ADD_TO])
def test_a_live_job_replaces_or_adds_to_an_earlier_runs_outputs(tmp_path, earlier):
    # A fresh live run's parts, numbered from 0, overwrote some of an
    # earlier live run's and sat beside the rest, and beside a batch run's.
    # A generated run replaces them; one that resumes adds to them.
    outputs, other = earlier_run_outputs(tmp_path)
    write_live(tmp_path, earlier)
    kept = outputs if earlier is EarlierOutputs.ADD_TO else []
    assert left(tmp_path) == sorted([*kept, other])


def test_a_fresh_live_job_on_the_users_files_keeps_an_earlier_runs_outputs(tmp_path):
    # It deleted them, though with --after_read delete or archive their
    # input was gone: the earlier run's results were lost for good.
    outputs, other = earlier_run_outputs(tmp_path)
    earlier = r"outputs of an earlier run \(anomalies-.* and 2 more\)"
    with pytest.raises(EarlierOutputsExist, match=earlier):
        write_live(tmp_path, EarlierOutputs.REFUSE)
    assert left(tmp_path) == sorted([*outputs, other])
    for path in outputs:
        pathlib.Path(path).unlink()
    write_live(tmp_path, EarlierOutputs.REFUSE)


@pytest.mark.parametrize(
    ("resume", "generated", "expected"),
    [
        (True, True, EarlierOutputs.ADD_TO),
        (True, False, EarlierOutputs.ADD_TO),
        (False, True, EarlierOutputs.REPLACE),
        (False, False, EarlierOutputs.REFUSE),
    ],
)
def test_what_a_live_run_does_with_earlier_outputs(resume, generated, expected):
    assert earlier_outputs(resume, generated) is expected


def test_a_generated_run_waits_for_its_own_disorder_unless_told_otherwise():
    configured = FollowSettings(
        poll_seconds=1, max_disorder_seconds=60, idle_timeout_seconds=30
    )

    def disorder(*argv):
        args = parsed_live_flags(*argv)
        return live_flags.disorder_of_generated(args, configured, 1.0)

    assert disorder().max_disorder_seconds == 1.0
    assert disorder("--poll_seconds", "2").max_disorder_seconds == 1.0
    # A value the user gives is theirs, by flag or by --set.
    assert disorder("--max_disorder_seconds", "60") == configured
    assert disorder("--set", "live.max_disorder_seconds=60") == configured


@pytest.mark.spark
def test_a_live_job_stops_when_its_command_asks(tmp_path, spark_session):
    # How the Photon command stops a job whose pipeline id another pipeline
    # took: the lease's event, set here by the first status line, which
    # comes only once the job is running.
    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(
            ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}"]
        ),
    )
    searches = pipeline | FollowSearchQueries(
        str(tmp_path / "*.jsonl"), settings=FollowSettings(poll_seconds=0.2)
    )
    _ = searches[RECORDS] | beam.Map(lambda search: search.query)
    taken = threading.Event()

    def status(result) -> str:
        taken.set()
        return "running"

    result = run_until_stopped(pipeline.run, status, 0.5, stop_when=taken)
    assert result.state == PipelineState.CANCELLED

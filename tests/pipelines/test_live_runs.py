"""`pipelines.live`: whether a live job resumes a checkpoint (`resumes`), which
decides whether a live generator keeps or deletes an earlier run's files,
and the status line's read rate (`read_rate`), which a resumed job's totals
must not inflate."""

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.live import read_rate, resumes


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

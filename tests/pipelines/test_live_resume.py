"""`pipelines.live.resumes`: whether a live job picks up a checkpoint, which
decides whether a live generator keeps or deletes an earlier run's files."""

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.live import resumes


def test_a_job_without_a_checkpoint_directory_starts_afresh():
    assert not resumes(PipelineOptions(["--streaming"]))


def test_a_new_or_empty_checkpoint_directory_starts_afresh(tmp_path):
    assert not resumes(PipelineOptions([f"--checkpoint_dir={tmp_path / 'new'}"]))
    assert not resumes(PipelineOptions([f"--checkpoint_dir={tmp_path}"]))


def test_a_checkpoint_directory_a_run_wrote_to_is_resumed(tmp_path):
    (tmp_path / "job.json").write_text("{}")
    assert resumes(PipelineOptions([f"--checkpoint_dir={tmp_path}"]))

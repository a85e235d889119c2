"""`pipelines.runner_choice.choose_runner`: which runner a command's
`--runner` means, and a warning for our runner's options it would ignore."""

import logging

from pipelines.runner_choice import choose_runner, warn_of_ignored_spark_flags
from runners.spark import SparkRunner


def test_spark_runner_is_ours_and_keeps_its_options():
    runner, rest = choose_runner(
        ["--runner=SparkRunner", "--spark_master_url=local[1]"]
    )
    assert isinstance(runner, SparkRunner)
    assert rest == ["--spark_master_url=local[1]"]


def test_a_java_job_server_leaves_the_choice_to_beam():
    args = ["--runner=SparkRunner", "--job_endpoint=localhost:8099"]
    assert choose_runner(args) == (None, args)


def test_our_options_on_beams_direct_runner_are_named_as_ignored(caplog):
    args = ["--spark_master_url=local[2]", "--checkpoint_dir", "/tmp/c"]
    with caplog.at_level(logging.WARNING, logger="pipelines.runner_choice"):
        warn_of_ignored_spark_flags(args)
    assert "--checkpoint_dir, --spark_master_url" in caplog.text
    assert "Beam's DirectRunner, which ignores them" in caplog.text


def test_no_warning_when_nothing_is_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="pipelines.runner_choice"):
        warn_of_ignored_spark_flags(["--runner=DirectRunner", "--direct_num_workers=1"])
        warn_of_ignored_spark_flags(
            ["--runner=PortableRunner", "--spark_master_url=local[2]"]
        )
        warn_of_ignored_spark_flags(["--runner=SparkRunner", "--checkpoint_dir=/c"])
    assert caplog.text == ""

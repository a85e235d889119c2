"""`pipelines.runner_choice.choose_runner`: which runner a command's
`--runner` means, and a warning for our runner's options it would ignore."""

import logging
import re

import pytest

from pipelines.runner_choice import (
    check_runner,
    choose_runner,
    is_beam_local,
    warn_of_ignored_spark_flags,
)
from runners.in_process import InProcessDirectRunner
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


@pytest.mark.parametrize(
    ("name", "chosen"),
    [
        ("SparkRunner", SparkRunner),
        ("spark", SparkRunner),
        ("runners.spark.SparkRunner", type(None)),  # a class: Beam imports it
        ("DirectRunner", InProcessDirectRunner),
        ("DIRECT", InProcessDirectRunner),
        ("SwitchingDirectRunner", InProcessDirectRunner),
        ("FnApiRunner", type(None)),
        ("PrismRunner", type(None)),
        ("BundleBasedDirectRunner", type(None)),
    ],
)
def test_runners_are_taken_as_beam_resolves_their_names(name, chosen):
    check_runner(name)
    runner, rest = choose_runner([f"--runner={name}", "--direct_num_workers=1"])
    assert type(runner) is chosen
    # Beam resolves the name itself when no runner is chosen here.
    kept = [] if runner is not None else [f"--runner={name}"]
    assert rest == [*kept, "--direct_num_workers=1"]


def test_no_runner_is_the_direct_runner_kept_in_process():
    runner, rest = choose_runner(["--direct_num_workers=1"])
    assert isinstance(runner, InProcessDirectRunner)
    assert rest == ["--direct_num_workers=1"]


def test_a_short_name_of_a_local_runner_is_local():
    assert is_beam_local("direct") and is_beam_local("fnapi")
    assert not is_beam_local("spark")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("SparkRuner", "unknown runner 'SparkRuner' (did you mean SparkRunner?)"),
        ("Sparkle", "--runner takes DataflowRunner, "),
        ("runners.spark.SparkRuner", "has no attribute 'SparkRuner'"),
        ("no_such_module.Runner", "No module named 'no_such_module'"),
    ],
)
def test_a_runner_that_does_not_exist_is_refused_before_the_job_is_built(name, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        choose_runner([f"--runner={name}"])

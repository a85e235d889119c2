"""`runners.in_process.InProcessDirectRunner`: Beam's DirectRunner without
its attempt to download and run Prism, choosing between its in-process
runners as before.

Prism cannot run here (its binary comes from GitHub, which this machine
does not reach), so what is shown is that the attempt is not made: Beam's
DirectRunner logs "Running pipeline with PrismRunner." before it tries, and
makes a `beam-temp*` directory in the temporary directory, which it leaves
when the attempt fails. The contrast runs Beam's own DirectRunner with
`--prism_location` naming a file that does not exist, so that its attempt
fails here and on a machine with network alike, without a download."""

import logging
import tempfile

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import DirectRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner import RunnerResult
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from runners.in_process import IN_PROCESS_DIRECT_RUNNER, InProcessDirectRunner

_PRISM_ATTEMPT = "Running pipeline with PrismRunner."
_DIRECT_LOGGER = "apache_beam.runners.direct.direct_runner"


@pytest.fixture(autouse=True)
def _temporary_directory(tmp_path, monkeypatch):
    """The test's own temporary directory, to see what a run leaves there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _attempt_leftovers(directory) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith("beam-temp")]


def _run_batch(runner, options: list[str]):
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(options))
    sums = (
        pipeline | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.CombinePerKey(sum)
    )
    assert_that(sums, equal_to([("a", 4), ("b", 2)]))
    result = pipeline.run()
    result.wait_until_finish()
    return result


def test_a_batch_job_runs_on_the_fn_api_runner_without_trying_prism(caplog, tmp_path):
    with caplog.at_level(logging.INFO, logger=_DIRECT_LOGGER):
        result = _run_batch(InProcessDirectRunner(), [])
    assert isinstance(result, RunnerResult)
    assert _PRISM_ATTEMPT not in caplog.text
    assert _attempt_leftovers(tmp_path) == []


def test_beams_own_direct_runner_tries_prism_first(caplog, tmp_path):
    missing = tmp_path / "no-prism-here"
    with caplog.at_level(logging.INFO, logger=_DIRECT_LOGGER):
        result = _run_batch(DirectRunner(), [f"--prism_location={missing}"])
    assert _PRISM_ATTEMPT in caplog.text
    assert len(_attempt_leftovers(tmp_path)) == 1
    assert isinstance(result, RunnerResult)  # its fallback, once Prism failed


def test_a_test_stream_still_runs_on_the_bundle_based_runner(caplog, tmp_path):
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([window.TimestampedValue(("a", 1), 1)])
        .add_elements([window.TimestampedValue(("a", 2), 2)])
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions(["--streaming"])
    with caplog.at_level(logging.INFO, logger=_DIRECT_LOGGER):
        pipeline = beam.Pipeline(runner=InProcessDirectRunner(), options=options)
        sums = (
            pipeline
            | stream
            | beam.WindowInto(window.FixedWindows(10))
            | beam.CombinePerKey(sum)
        )
        assert_that(sums, equal_to([("a", 3)]))
        result = pipeline.run()
        result.wait_until_finish()
    assert not isinstance(result, RunnerResult)
    assert type(result).__module__.startswith("apache_beam.runners.direct")
    assert _PRISM_ATTEMPT not in caplog.text
    assert _attempt_leftovers(tmp_path) == []


def test_it_is_a_runner_by_name():
    result = _run_batch(None, [f"--runner={IN_PROCESS_DIRECT_RUNNER}"])
    assert isinstance(result, RunnerResult)

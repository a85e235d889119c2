"""A failing step is reported once: by what is raised, not also by Beam's log.

Beam's DoFn runner logs a step's exception with its traceback just before it
raises it again; on the commands' DirectRunner (whose logging the commands
set up) and in the SparkRunner's Python workers (which print to the job's
stderr) that put a traceback before a job error's one line. Real
subprocesses, so that nothing of the test process's logging set-up counts.
"""

import subprocess
import sys

import pytest

_FAILING_JOB = """
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import console
from runners.in_process import InProcessDirectRunner
from runners.spark import SparkRunner

if sys.argv[1] == "DirectRunner":
    console.configure_logging()  # as the commands do, on the runner they use
    runner, flags = InProcessDirectRunner(), []
else:
    runner, flags = SparkRunner(), ["--spark_master_url=local[1]"]

def fail(element):
    raise ValueError("the step failed")

try:
    with beam.Pipeline(runner=runner, options=PipelineOptions(flags)) as p:
        p | beam.Create([1]) | beam.Map(fail)
except Exception as error:
    print("raised", type(error).__name__)
    print("the step's message:", "the step failed" in str(error))
"""


@pytest.mark.parametrize("runner", ["DirectRunner", "SparkRunner"])
def test_a_failing_step_leaves_no_traceback_before_it_is_raised(runner):
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_JOB, runner],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # The step's own error, raised once: not one from before it ran.
    assert done.stdout.splitlines() == [
        "raised ValueError",
        "the step's message: True",
    ], done.stderr[-3000:]
    assert "the step failed" not in done.stderr, done.stderr[-3000:]

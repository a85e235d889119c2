"""The Beam limitation behind `--follow`'s usage error on the DirectRunner.

`pipelines.live.require_follow_runner` refuses Beam's DirectRunner for a
followed directory. This test pins the reason on the installed Beam: its
bundle-based DirectRunner cannot expand an unbounded splittable DoFn in
streaming, Beam's own `PeriodicImpulse` included. When a Beam upgrade makes
it fail, the limitation is gone and `--follow` can be allowed there.
"""

import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse


def test_beams_direct_runner_cannot_run_an_unbounded_splittable_dofn_live():
    start = time.time()
    pipeline = beam.Pipeline(
        runner="BundleBasedDirectRunner", options=PipelineOptions(["--streaming"])
    )
    _ = pipeline | PeriodicImpulse(
        start_timestamp=start, stop_timestamp=start + 2, fire_interval=1
    )
    with pytest.raises(RuntimeError, match="was not replaced as expected"):
        pipeline.run().wait_until_finish()

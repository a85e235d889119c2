"""``runners.spark.job_server``: Beam's Job API in front of SparkRunner."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from runners.spark.job_server import serve
from runners.spark.options import SparkOptions

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]


def test_portable_runner_job_runs_on_spark():
    servicer, port = serve(0, SparkOptions(["--spark_master_url=local[2]"]))
    try:
        counter = beam.metrics.Metrics.counter("js", "seen")

        def key_by_parity(x):
            counter.inc()
            return x % 2, x

        options = PipelineOptions(
            ["--runner=PortableRunner", f"--job_endpoint=localhost:{port}"]
        )
        p = beam.Pipeline(options=options)
        sums = (
            p
            | beam.Create(range(10))
            | beam.Map(key_by_parity)
            | beam.CombinePerKey(sum)
        )
        assert_that(sums, equal_to([(0, 20), (1, 25)]))
        result = p.run()
        assert result.wait_until_finish() == "DONE"
        counters = result.metrics().query(
            beam.metrics.MetricsFilter().with_name("seen")
        )
        assert sum(c.committed for c in counters["counters"]) == 10
    finally:
        servicer.stop()

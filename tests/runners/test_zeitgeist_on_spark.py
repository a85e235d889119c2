"""Zeitgeist on our SparkRunner gives exactly what the DirectRunner gives."""

import json
import os
import pathlib
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import config as config_loader
from pipelines.zeitgeist import build, zeitgeist_transform
from pipelines.zeitgeist_flags import DEFAULT_CONFIG
from runners.spark import SparkRunner
from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate
from transforms.zeitgeist.composite import ANOMALIES, SCORES, WINDOW_COUNTS

pytestmark = [pytest.mark.spark, pytest.mark.slow]
OUTPUTS = (ANOMALIES, WINDOW_COUNTS, SCORES)


def run(source: pathlib.Path, output: pathlib.Path, pipeline: beam.Pipeline) -> dict:
    config = config_loader.read(DEFAULT_CONFIG)
    with pipeline:
        build(
            pipeline,
            [str(source)],
            None,
            zeitgeist_transform(config),
            output,
            [WINDOW_COUNTS, SCORES],
        )
    return {
        name: sorted(
            json.dumps(json.loads(line), sort_keys=True)
            for path in output.glob(f"{name}*.jsonl")
            for line in path.read_text().splitlines()
        )
        for name in OUTPUTS
    }


def test_same_anomalies_counts_and_scores_as_the_direct_runner(tmp_path, spark_session):
    # Half a day of 12 queries with episodes; individual searches, in
    # arrival order with some out of order, so the shuffle really matters.
    spec = StreamSpec(
        num_queries=12,
        duration_ms=DAY_MS // 2,
        warmup_ms=2 * 3_600_000,
        out_of_order_fraction=0.05,
    )
    stream = generate(spec, seed=2)
    source = tmp_path / "searches.parquet"
    stream.write_parquet(source)

    direct = run(source, tmp_path / "direct", beam.Pipeline())
    spark = run(
        source,
        tmp_path / "spark",
        beam.Pipeline(
            runner=SparkRunner(),
            options=PipelineOptions(["--spark_master_url=local[2]"]),
        ),
    )
    assert direct[WINDOW_COUNTS], "the stream must produce windows"
    assert direct[ANOMALIES], "the stream has injected episodes"
    for name in OUTPUTS:
        assert spark[name] == direct[name], name


def run_cli(output: pathlib.Path, *extra: str) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.zeitgeist",
            "--output",
            str(output),
            "--num_queries",
            "6",
            "--days",
            "0.5",
            "--seed",
            "2",
            "--write_window_counts",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return {
        name: sorted(
            json.dumps(json.loads(line), sort_keys=True)
            for path in output.glob(f"{name}*.jsonl")
            for line in path.read_text().splitlines()
        )
        for name in (ANOMALIES, WINDOW_COUNTS)
    }


def test_cli_on_a_standalone_cluster_matches_the_direct_runner(tmp_path, spark_cluster):
    direct = run_cli(tmp_path / "direct")
    before = spark_cluster.applications()
    on_cluster = run_cli(
        tmp_path / "cluster",
        "--runner=SparkRunner",
        f"--spark_master_url={spark_cluster.master_url}",
    )
    # On the cluster: local mode would give the same outputs.
    assert len(spark_cluster.applications() - before) == 1
    assert direct[WINDOW_COUNTS]
    assert on_cluster == direct

"""Strong productions pass records through a checkpoint; weak ones get stable keys."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.millwheel.strong_production_job import ELEMENTS
from transforms.millwheel.productions import StrongProduction, deterministic_row_key

ROOT = Path(__file__).resolve().parents[2]


def test_strong_production_applies_the_step_after_a_checkpoint():
    with BeamPipeline() as pipeline:
        out = (
            pipeline
            | beam.Create([1, 2, 3])
            | StrongProduction(beam.Map(lambda x: x * 10))
        )
        assert_that(out, equal_to([10, 20, 30]))


@pytest.mark.spark
@pytest.mark.slow
def test_a_retried_step_replays_the_checkpoint_not_the_steps_before_it(tmp_path):
    # The step's Python worker is killed once and Spark retries its task:
    # from the checkpoint, the step before it is not computed again. Without
    # it, the two are one stage, and the retry computes every element of
    # the task again (a non-deterministic step would answer otherwise).
    computed, markers = tmp_path / "computed", tmp_path / "markers"
    markers.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "tests.millwheel.strong_production_job"),
            f"--computed={computed}",
            f"--markers={markers}",
            f"--output={tmp_path / 'out' / 'steps'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert [p.name for p in markers.iterdir()] == ["step"], "no worker was killed"
    assert sorted(map(int, computed.read_text().split())) == list(range(ELEMENTS))
    outputs = [
        int(line)
        for path in (tmp_path / "out").iterdir()
        for line in path.read_text().split()
    ]
    assert sorted(outputs) == [10 * e for e in range(ELEMENTS)]


def test_row_key_is_a_hash_prefix_and_the_parts():
    body = b"cats#1700000000000"
    prefix = hashlib.blake2b(body, digest_size=2).hexdigest().encode()
    assert deterministic_row_key("cats", 1700000000000) == prefix + b"#" + body


def test_row_key_is_stable_and_unambiguous():
    assert deterministic_row_key("q", b"x", 3) == deterministic_row_key("q", "x", "3")
    assert deterministic_row_key("a#", "b") != deterministic_row_key("a", "#b")
    assert deterministic_row_key("a\\", "#b") != deterministic_row_key("a\\#", "b")


def test_row_key_needs_parts():
    with pytest.raises(ValueError, match="at least one part"):
        deterministic_row_key()

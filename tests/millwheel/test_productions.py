"""Strong productions pass records through a checkpoint; weak ones get stable keys."""

import hashlib

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.millwheel.productions import StrongProduction, deterministic_row_key


def test_strong_production_applies_the_step_after_a_checkpoint():
    with BeamPipeline() as pipeline:
        out = (
            pipeline
            | beam.Create([1, 2, 3])
            | StrongProduction(beam.Map(lambda x: x * 10))
        )
        assert_that(out, equal_to([10, 20, 30]))

    labels = {
        t.unique_name for t in pipeline.to_runner_api().components.transforms.values()
    }
    assert "StrongProduction/Checkpoint" in labels
    assert "StrongProduction/Step" in labels


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

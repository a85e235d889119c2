"""Mistakes a job that imports Zeitgeist can make, caught where they are
made: a parameter of the wrong kind or out of range at construction, input
in windows of the user's at expand, an element that is not a search as a
dead letter with the reason."""

import math
import typing

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows
from apache_beam.typehints.decorators import TypeCheckError

from tests.zeitgeist.streaming import MINUTE, T0
from transforms.millwheel.event_time import WithEventTimestamps
from transforms.millwheel.lateness import LatePolicy
from transforms.records.dead_letters import DEAD_LETTERS
from transforms.records.zeitgeist_pb2 import SearchQuery
from transforms.zeitgeist.composite import WINDOW_COUNTS, Zeitgeist
from transforms.zeitgeist.params import DetectorParams, ModelParams, WindowParams
from transforms.zeitgeist.window_counter import CountWindows

WINDOW = WindowParams(size_ms=MINUTE)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: WindowParams(size_ms=60_000.0), TypeError, "window.size_ms"),
        (lambda: WindowParams(late_data=5), TypeError, "window.late_data"),
        # Before, accepted, then an OverflowError in the counter's worker.
        (
            lambda: WindowParams(size_ms=10**18),
            ValueError,
            "window size must be at most 709174577358059 ms with 12 windows",
        ),
        (
            lambda: WindowParams(size_ms=10**13, activity_horizon_windows=10**6),
            ValueError,
            "at most 9219260286 ms with 1000000 windows",
        ),
        (
            lambda: DetectorParams(slack_sigma=math.nan),
            TypeError,
            "detector.slack_sigma must be a finite number",
        ),
        (lambda: DetectorParams(threshold=math.inf), TypeError, "detector.threshold"),
        (
            lambda: DetectorParams(max_deviation_sigma=-1),
            ValueError,
            "max_deviation_sigma must be above slack_sigma",
        ),
        (lambda: DetectorParams(far_surprise=1), TypeError, "True or False"),
        (
            lambda: DetectorParams(min_history_windows=-1),
            ValueError,
            "min_history_windows",
        ),
        (lambda: ModelParams(clip_sigma=-1), ValueError, "model.clip_sigma"),
        (lambda: ModelParams(alpha="0.2"), TypeError, "model.alpha"),
        (lambda: Zeitgeist(60_000), TypeError, "window must be a WindowParams"),
        (
            lambda: Zeitgeist(WINDOW, DetectorParams()),
            TypeError,
            "model must be a ModelParams",
        ),
        (lambda: Zeitgeist(WINDOW, key_fn="fold"), TypeError, "key_fn"),
        (lambda: Zeitgeist(WINDOW, dedup_horizon_ms=-1), ValueError, "dedup"),
    ],
)
def test_parameters_are_checked_when_they_are_made(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_late_data_policy_may_be_named():
    assert WindowParams(late_data="correct").late_data.policy is LatePolicy.CORRECT


def searches(pipeline, *records):
    return pipeline | beam.Create(records) | WithEventTimestamps()


@pytest.mark.parametrize("on_batches", [False, True])
def test_input_in_windows_of_its_own_is_refused_at_expand(on_batches):
    zeitgeist = Zeitgeist(WINDOW)
    if on_batches:
        zeitgeist = zeitgeist.on_batches()
    pipeline = test_pipeline.TestPipeline()
    windowed = searches(
        pipeline, SearchQuery(query="q", event_time=T0)
    ) | beam.WindowInto(FixedWindows(600))
    with pytest.raises(ValueError, match="global window.*WindowParams"):
        windowed | zeitgeist


def test_unkeyed_searches_into_count_windows_fail_at_expand():
    # Not run: the refused transform is already half applied.
    pipeline = test_pipeline.TestPipeline()
    unkeyed = searches(pipeline, SearchQuery(query="q", event_time=T0))
    with pytest.raises(TypeCheckError, match="CombineWithinBundle.*Tuple"):
        unkeyed | CountWindows(WINDOW)


def test_elements_that_are_not_searches_and_times_in_seconds_are_dead_letters():
    good = SearchQuery(query="q", event_time=T0 + 1_000, count=2)
    in_seconds = SearchQuery(query="q", event_time=T0 // 1000)
    # Beyond Beam's timestamps: stamping it failed the job.
    far = SearchQuery(query="q", event_time=2**62)
    with test_pipeline.TestPipeline() as pipeline:
        # As the README's example feeds Zeitgeist; the dict, which has no
        # event time, failed the job there. Untyped, as a source of mixed
        # records is (a PCollection typed otherwise is refused at build).
        mixed = [good, {"query": "q"}, in_seconds, far]
        records = pipeline | beam.Create(mixed).with_output_types(typing.Any)
        outputs = records | WithEventTimestamps() | Zeitgeist(WINDOW)
        reasons = outputs[DEAD_LETTERS] | beam.Map(lambda d: (d.reason, d.raw))
        assert_that(
            reasons,
            equal_to(
                [
                    ("expected a SearchQuery, got a dict", b"{'query': 'q'}"),
                    (
                        "field 'event_time' must be between 2000-01-01 and "
                        f"2100-01-01 UTC, got {T0 // 1000}",
                        in_seconds.SerializeToString(),
                    ),
                    (
                        "field 'event_time' must be between 2000-01-01 and "
                        f"2100-01-01 UTC, got {2**62}",
                        far.SerializeToString(),
                    ),
                ]
            ),
            label="DeadLetters",
        )
        counts = outputs[WINDOW_COUNTS] | beam.Map(lambda w: (w.window_start, w.count))
        assert_that(counts, equal_to([(T0, 2)]), label="Counts")

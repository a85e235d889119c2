"""`restamped` puts an output where `TimestampedValue` would, in any window."""

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from transforms.millwheel.event_time import restamped, to_timestamp


class _Restamp(beam.DoFn):
    """Outputs each (value, new time in ms) at that time, one way or the other."""

    def __init__(self, use_restamped: bool):
        self._use_restamped = use_restamped

    def process(self, element, in_window=beam.DoFn.WindowParam):
        value, ms = element
        if self._use_restamped:
            yield restamped(value, to_timestamp(ms), in_window)
        else:
            yield window.TimestampedValue(value, to_timestamp(ms))


def _placed(value, timestamp=beam.DoFn.TimestampParam, at=beam.DoFn.WindowParam):
    return value, timestamp.micros, repr(at)


@pytest.mark.parametrize(
    "windowing",
    [window.GlobalWindows(), window.FixedWindows(10)],
    ids=["global", "fixed"],
)
def test_restamped_outputs_land_where_timestamped_values_land(windowing):
    # Inputs stamped at 0 s; the outputs move to 5 s and 25 s, so that in
    # fixed windows of 10 s one stays in the input's window and one leaves it.
    elements = [("stays", 5_000), ("moves", 25_000)]
    results = {}
    with beam.Pipeline() as pipeline:
        inputs = (
            pipeline
            | beam.Create(elements)
            | beam.Map(lambda e: window.TimestampedValue(e, 0))
            | beam.WindowInto(windowing)
        )
        for use_restamped in (False, True):
            label = f"restamped={use_restamped}"
            results[use_restamped] = (
                inputs
                | f"Restamp {label}" >> beam.ParDo(_Restamp(use_restamped))
                | f"Placed {label}" >> beam.Map(_placed)
            )
        if isinstance(windowing, window.GlobalWindows):
            expected = [
                ("stays", 5_000_000, "GlobalWindow"),
                ("moves", 25_000_000, "GlobalWindow"),
            ]
        else:
            expected = [
                ("stays", 5_000_000, "[0.0, 10.0)"),
                ("moves", 25_000_000, "[20.0, 30.0)"),
            ]
        assert_that(results[False], equal_to(expected), label="timestamped")
        assert_that(results[True], equal_to(expected), label="restamped")

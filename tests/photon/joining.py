"""Running `PhotonJoin` over scripted events on the DirectRunner, for tests."""

import apache_beam as beam
from apache_beam.coders import FastPrimitivesCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from testing.scenarios import timestamped
from transforms.millwheel.event_time import to_timestamp
from transforms.photon import BigtableTarget, PhotonJoin
from transforms.records.photon_pb2 import ClickEvent, QueryEvent

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z
MINUTE = 60_000
DAY = 24 * 60 * MINUTE


def query(query_id, event_time, **fields):
    return QueryEvent(query_id=query_id, event_time=event_time, ad_id="ad1", **fields)


def click(click_id, query_id, event_time, **fields):
    return ClickEvent(
        click_id=click_id, query_id=query_id, event_time=event_time, **fields
    )


def target_of(bigtable_instance):
    return BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id)


def pipeline(streaming=False):
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = streaming
    return TestPipeline(options=options)


class Script:
    """A TestStream of queries and clicks: batches and watermark advances."""

    def __init__(self):
        self._stream = TestStream(coder=FastPrimitivesCoder())
        self._watermark = None

    def add(self, *events):
        self._stream.add_elements(timestamped(events, lambda e: e.event_time))
        return self

    def advance(self, watermark_ms):
        self._stream.advance_watermark_to(to_timestamp(watermark_ms))
        self._watermark = watermark_ms
        return self

    def build(self):
        # Finite first: timers pending at a jump to infinity would not fire.
        self._stream.advance_watermark_to(to_timestamp(self._watermark + DAY))
        return self._stream.advance_watermark_to_infinity()


def split(p, events):
    """(queries, clicks) of a TestStream `Script` or a list of events."""
    if isinstance(events, Script):
        source = p | "Events" >> events.build()
    else:
        source = p | "Events" >> beam.Create(
            timestamped(events, lambda e: e.event_time)
        )
    queries = source | "Queries" >> beam.Filter(
        lambda e: isinstance(e, QueryEvent)
    ).with_output_types(QueryEvent)
    clicks = source | "Clicks" >> beam.Filter(
        lambda e: isinstance(e, ClickEvent)
    ).with_output_types(ClickEvent)
    return queries, clicks


def join(p, events, target, token="A", **params):
    return split(p, events) | "PhotonJoin" >> PhotonJoin(target, token, **params)


def expect(pcoll, project, expected, label):
    assert_that(
        pcoll | f"Project{label}" >> beam.Map(project),
        equal_to(expected),
        label=f"Check{label}",
    )

"""``TestStream`` executed by the runner, event by event, at quiescence.

The script's position (how many events have been applied) is the source's
offset. A micro-batch takes, from the position, one element event and the
watermark event after it, if any; a processing-time event is a batch of its
own, applied before the batch runs. The driver takes the next step
only once the pipeline is quiescent (no work left at the current watermarks
and processing time), so watermarks and processing time move exactly as
scripted, and timers and panes see each step as they would on Beam's
DirectRunner. Processing time starts at 0, as Beam's test clock does.

Elements go out in the global window at their scripted timestamps (a
scripted ``WindowedValue`` in its own windows). A
watermark event moves the named output's watermark once the batch holding
it is done. After the last event comes one more step, at quiescence too,
that moves every output's watermark to +inf.

A TestStream that names a TestStreamService (``endpoint``) has its events
read from the service once, when the job starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from apache_beam.coders import PickleCoder
from apache_beam.portability.api import (
    beam_interactive_api_pb2,
    beam_interactive_api_pb2_grpc,
    beam_runner_api_pb2,
)
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.testing.test_stream import WindowedValueHolder
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.components import context_from_bytes, encode_chunks
from runners.spark.watermark import MAX_MICROS, MIN_MICROS

TEST_STREAM_URN = "beam:transform:teststream:v1"
# Times in a TestStream payload are milliseconds; Beam's DirectRunner reads
# the events a TestStreamService sends as microseconds, and so does this one.
_PAYLOAD_UNIT_MICROS = 1000
_SERVICE_UNIT_MICROS = 1
# How long a TestStreamService may take to send its whole script.
_SERVICE_TIMEOUT_SECONDS = 60


def _to_micros(value: int, unit_micros: int) -> int:
    if value >= MAX_MICROS // unit_micros:
        return MAX_MICROS
    return max(value * unit_micros, MIN_MICROS)


def _windowed(value, micros: int) -> WindowedValue:
    # A scripted WindowedValue travels wrapped, and goes out in its own
    # windows, timestamp and pane, as on Beam's DirectRunner.
    if isinstance(value, WindowedValueHolder):
        return value.windowed_value
    return WindowedValue(value, Timestamp(micros=micros), (GlobalWindow(),))


def _events_from_service(
    url: str, output_tags: list[str]
) -> list[beam_runner_api_pb2.TestStreamPayload.Event]:
    """A TestStreamService's whole script, read once when the job starts:
    the position in it is the source's offset, as for a script given in the
    pipeline, so the service must end its stream."""
    channel = grpc.insecure_channel(url)
    stub = beam_interactive_api_pb2_grpc.TestStreamServiceStub(channel)
    request = beam_interactive_api_pb2.EventsRequest(output_ids=output_tags)
    try:
        return list(stub.Events(request, timeout=_SERVICE_TIMEOUT_SECONDS))
    except grpc.RpcError as error:
        raise RuntimeError(
            f"SparkRunner reads a TestStreamService's events once, at the "
            f"start; the one at {url} did not end its stream within "
            f"{_SERVICE_TIMEOUT_SECONDS} s: {error.details()}"
        ) from None
    finally:
        channel.close()


def carry_scripted_windows(pipeline: beam_runner_api_pb2.Pipeline) -> None:
    """A TestStream may script an element into windows of its own (a
    ``WindowedValueHolder``) that its PCollection's window coder cannot
    encode: an ``IntervalWindow`` in the global window's PCollection. Beam's
    DirectRunner passes such an element as an object; here elements move as
    bytes, so that TestStream's outputs take a window coder that carries any
    window (pickled). Only such a TestStream's outputs are changed."""
    components = pipeline.components
    context = pipeline_context.PipelineContext(components)
    for transform in components.transforms.values():
        if transform.spec.urn != TEST_STREAM_URN:
            continue
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(
            transform.spec.payload
        )
        if not _scripts_windows(payload, context):
            continue
        any_window = translations.unique_name(components.coders, "any_window")
        components.coders[any_window].CopyFrom(PickleCoder().to_runner_api(context))
        for pcoll_id in transform.outputs.values():
            pcoll = components.pcollections[pcoll_id]
            carried = translations.unique_name(
                components.windowing_strategies, pcoll.windowing_strategy_id
            )
            strategy = components.windowing_strategies[carried]
            strategy.CopyFrom(
                components.windowing_strategies[pcoll.windowing_strategy_id]
            )
            strategy.window_coder_id = any_window
            pcoll.windowing_strategy_id = carried


def _scripts_windows(
    payload: beam_runner_api_pb2.TestStreamPayload, context: Any
) -> bool:
    """Whether the script puts an element into windows of its own."""
    coder = context.coders.get_by_id(payload.coder_id)
    return any(
        isinstance(coder.decode(e.encoded_element), WindowedValueHolder)
        for event in payload.events
        if event.WhichOneof("event") == "element_event"
        for e in event.element_event.elements
    )


@dataclass(frozen=True)
class ScriptStep:
    """The events ``[start, end)`` of one batch, decoded."""

    start: int
    end: int
    elements: dict[str, list[bytes]]  # output PCollection -> encoded chunks
    advance_processing_micros: int
    element_count: int


class ScriptedStream:
    """One TestStream transform's events, addressed by position."""

    def __init__(
        self,
        transform: beam_runner_api_pb2.PTransform,
        components: bytes,
        windowed_coders: dict[str, str],
    ) -> None:
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(
            transform.spec.payload
        )
        self.name = transform.unique_name
        if payload.endpoint.url:
            self.events = _events_from_service(
                payload.endpoint.url, list(transform.outputs)
            )
            self._unit = _SERVICE_UNIT_MICROS
        else:
            self.events = list(payload.events)
            self._unit = _PAYLOAD_UNIT_MICROS
        self.outputs = dict(transform.outputs)
        self._components = components
        self._element_coder_id = payload.coder_id
        self._windowed = windowed_coders

    @property
    def end_position(self) -> int:
        """The position after the final step (every watermark at +inf)."""
        return len(self.events) + 1

    def done(self, position: int) -> bool:
        """Whether the script has ended at ``position`` (the final step to
        +inf included)."""
        return position > len(self.events)

    def next_step(self, position: int) -> ScriptStep:
        """The batch that starts at ``position``."""
        end = position
        if end == len(self.events):
            end += 1  # the final step: every watermark to +inf
        elif self._kind(end) == "processing_time_event":
            end += 1
        else:
            # One element event per batch: it is one bundle on Beam's
            # DirectRunner too, and a count trigger sees it as one.
            if self._kind(end) == "element_event":
                end += 1
            if end < len(self.events) and self._kind(end) == "watermark_event":
                end += 1
        return self.step(position, end)

    def step(self, start: int, end: int) -> ScriptStep:
        """The events ``[start, end)``, as the batch that logged them reads."""
        context = context_from_bytes(self._components)
        element_impl = context.coders[self._element_coder_id].get_impl()
        elements: dict[str, list[bytes]] = {}
        advance = count = 0
        for event in self.events[start:end]:
            kind = event.WhichOneof("event")
            if kind == "processing_time_event":
                advance += event.processing_time_event.advance_duration * self._unit
            elif kind == "element_event":
                count += len(event.element_event.elements)
                pcoll = self.outputs[event.element_event.tag]
                impl = context.coders[self._windowed[pcoll]].get_impl()
                values = (
                    _windowed(
                        element_impl.decode(e.encoded_element),
                        _to_micros(e.timestamp, self._unit),
                    )
                    for e in event.element_event.elements
                )
                elements.setdefault(pcoll, []).extend(encode_chunks(values, impl))
        return ScriptStep(start, end, elements, advance, count)

    def watermarks(self, position: int) -> dict[str, int]:
        """Each output's watermark once the steps before ``position`` are
        applied (+inf for all once the script has ended)."""
        marks = dict.fromkeys(self.outputs.values(), MIN_MICROS)
        if self.done(position):
            return dict.fromkeys(marks, MAX_MICROS)
        for event in self.events[:position]:
            if event.WhichOneof("event") == "watermark_event":
                pcoll = self.outputs[event.watermark_event.tag]
                marks[pcoll] = _to_micros(
                    event.watermark_event.new_watermark, self._unit
                )
        return marks

    def processing_time(self, position: int) -> int:
        """The scripted processing time after the events before ``position``."""
        return sum(
            e.processing_time_event.advance_duration * self._unit
            for e in self.events[:position]
            if e.WhichOneof("event") == "processing_time_event"
        )

    def _kind(self, index: int) -> str:
        return self.events[index].WhichOneof("event")

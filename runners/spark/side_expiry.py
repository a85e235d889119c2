"""Which windows of a side input no main-input element can read any more.

A main-input element in window W reads the side input's window that the
side input's window mapping fn maps W to. Python's SDK gives every side
input Beam's default mapping (`sideinputs.default_window_mapping_fn`): the
side window that holds W's last instant. Fixed and sliding windows hold
the instants assigned to them, so that side window ends no earlier than W
does: no main window that ends after a side window maps to it (Beam's
Java SDK declares these mappings' maximum look-back,
`WindowMappingFn.maximumLookback`, zero; the portable proto carries no
look-back at all).

A main input's elements may be late up to its windowing's allowed
lateness: an element of W is droppable once the watermark has passed W's
end plus that lateness, the rule the runner's GroupByKeys drop by
(`streaming_gbk.py`). So a side window has expired once, for every stage
that reads the side input, the stage's input watermark has passed the
side window's end plus the allowed lateness of the main input that reads
it: every main window that maps to it has expired too. A stage's input
watermark is the least of its inputs', side inputs included. An element
the stage pushed back has yet to read its side inputs, maybe for long: a
stage judges it by the windows of its own input, which are not those the
reading ParDo sees when a WindowInto is fused before it. So it holds the
stage's watermark here at its timestamp, before the end of any window
that holds it.

When in doubt, keep: the global window never expires, nor does any window
of a side input under another WindowFn (a custom one's windows need not
hold the instants assigned to them) or read through another mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from apache_beam.internal import pickler
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms import sideinputs, window
from apache_beam.utils import proto_utils

from runners.spark.driver_stages import EXECUTABLE_STAGE
from runners.spark.watermark import MAX_MICROS, MIN_MICROS

# WindowFns whose windows hold the instants assigned to them.
_HOLDING = frozenset(
    {
        common_urns.fixed_windows.urn,
        common_urns.sliding_windows.urn,
    }
)
# Beam's default mapping, whichever side windows it was made for.
_MAP_VIA_END = sideinputs.default_window_mapping_fn(window.FixedWindows(1)).__code__


@dataclass(frozen=True)
class _Reader:
    """A stage that reads a side input: its name, the PCollections whose
    least watermark is its input watermark, and the allowed lateness (µs)
    of the main input that reads the side input."""

    stage: str
    inputs: tuple[str, ...]
    lateness: int


@dataclass(frozen=True)
class Horizon:
    """How far one side input's windows have expired."""

    # Windows that end before this (µs) can no longer be read.
    end: int
    window_coder: Any

    def passed(self, window: bytes) -> bool:
        """Whether the encoded ``window`` has expired."""
        return self.window_coder.decode(window).end.micros < self.end


class SideExpiry:
    """The pipeline's side inputs whose windows expire, and their readers."""

    def __init__(
        self,
        primitives: Iterable[beam_runner_api_pb2.PTransform],
        components: beam_runner_api_pb2.Components,
        window_coder_of: Callable[[str], Any],
    ) -> None:
        readings = [r for p in primitives for r in _readings(p)]
        self._readers: dict[str, list[_Reader]] = {}
        for pc, reader, _ in readings:
            self._readers.setdefault(pc, []).append(reader)
        mapped_otherwise = {
            pc for pc, _, mapping in readings if not _maps_via_end(mapping)
        }
        self._window_coders = {
            pc: window_coder_of(pc)
            for pc in self._readers
            if pc not in mapped_otherwise and _holds_its_instants(pc, components)
        }

    def horizons(
        self, watermarks: dict[str, int], pushed: dict[str, int]
    ) -> dict[str, Horizon]:
        """Per side input whose windows expire, how far they have under a
        committed batch's PCollection ``watermarks`` (one it does not know
        holds them back) and the earliest timestamp each stage has ``pushed``
        back."""
        return {
            pc: Horizon(
                min(_watermark(r, watermarks, pushed) - r.lateness for r in readers),
                self._window_coders[pc],
            )
            for pc, readers in self._readers.items()
            if pc in self._window_coders
        }


def _watermark(
    reader: _Reader, watermarks: dict[str, int], pushed: dict[str, int]
) -> int:
    """How far the reader's main elements have got: its input watermark,
    held back by the elements it pushed back."""
    marks = [watermarks.get(pc, MIN_MICROS) for pc in reader.inputs]
    return min(marks + [pushed.get(reader.stage, MAX_MICROS)])


def _readings(
    proto: beam_runner_api_pb2.PTransform,
) -> list[tuple[str, _Reader, beam_runner_api_pb2.FunctionSpec]]:
    """(side PCollection, its reader, its window mapping) for each side
    input a fused stage reads."""
    if proto.spec.urn != EXECUTABLE_STAGE:
        return []
    stage = beam_runner_api_pb2.ExecutableStagePayload.FromString(proto.spec.payload)
    inputs = tuple(sorted(set(proto.inputs.values())))
    found = []
    for side in stage.side_inputs:
        consumer = stage.components.transforms[side.transform_id]
        pardo = proto_utils.parse_Bytes(
            consumer.spec.payload, beam_runner_api_pb2.ParDoPayload
        )
        main = [
            pc for tag, pc in consumer.inputs.items() if tag not in pardo.side_inputs
        ]
        lateness = max(_lateness_micros(pc, stage.components) for pc in main)
        found.append(
            (
                consumer.inputs[side.local_name],
                _Reader(proto.unique_name, inputs, lateness),
                pardo.side_inputs[side.local_name].window_mapping_fn,
            )
        )
    return found


def _lateness_micros(pc: str, components: beam_runner_api_pb2.Components) -> int:
    """The allowed lateness of ``pc``'s windowing (the proto's is in ms)."""
    strategy_id = components.pcollections[pc].windowing_strategy_id
    return components.windowing_strategies[strategy_id].allowed_lateness * 1000


def _holds_its_instants(pc: str, components: beam_runner_api_pb2.Components) -> bool:
    strategy_id = components.pcollections[pc].windowing_strategy_id
    return components.windowing_strategies[strategy_id].window_fn.urn in _HOLDING


def _maps_via_end(mapping: beam_runner_api_pb2.FunctionSpec) -> bool:
    """Whether ``mapping`` is Beam's default window mapping."""
    if mapping.urn != python_urns.PICKLED_WINDOW_MAPPING_FN:
        return False
    return getattr(pickler.loads(mapping.payload), "__code__", None) == _MAP_VIA_END

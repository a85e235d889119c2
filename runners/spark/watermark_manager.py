"""Watermarks per PCollection, computed on the driver before each batch.

After Beam's ``fn_api_runner/watermark_manager.py`` and Prism's element
manager: a transform's input watermark is the minimum of the output
watermarks of everything it reads, side inputs included; its output
watermark is the minimum of its input watermark and its holds: the earliest
output timestamp any of its key groups may still produce (timer holds, a
grouping's pending panes), a deferred splittable-DoFn remainder's reported
watermark, elements it has pushed back. Sources (Impulse, TestStream) set
their outputs' watermarks directly.

A batch runs with the watermarks computed from the holds of the batch
before it. Elements produced in the batch are never behind them: an
element is caused by an input or a timer that was at or past its
transform's watermark. A hold released in the batch moves the watermarks
of the next batch, which the driver runs until nothing moves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from apache_beam.portability.api import beam_runner_api_pb2

from runners.spark.watermark import MAX_MICROS


@dataclass(frozen=True)
class Watermarks:
    """One batch's watermarks (µs): per transform input, per PCollection."""

    inputs: dict[str, int]
    pcollections: dict[str, int]

    def output_of(self, transform: str, outputs: Iterable[str]) -> int:
        """A transform's output watermark (the one of its outputs)."""
        marks = [self.pcollections[pc] for pc in outputs]
        return min(marks) if marks else self.inputs[transform]


class WatermarkManager:
    """The pipeline's transform graph, for computing watermarks."""

    def __init__(self, primitives: Iterable[beam_runner_api_pb2.PTransform]) -> None:
        self._transforms = [
            (p.unique_name, sorted(set(p.inputs.values())), sorted(p.outputs.values()))
            for p in primitives
        ]
        producers = {
            pc: name for name, _, outputs in self._transforms for pc in outputs
        }
        self._order = self._topological(producers)

    def _topological(self, producers: dict[str, str]) -> list[tuple]:
        done: set[str] = set()
        ordered = []
        pending = list(self._transforms)
        while pending:
            ready = [
                t for t in pending if all(producers.get(pc) in done for pc in t[1])
            ]
            if not ready:
                names = ", ".join(t[0] for t in pending)
                raise ValueError(f"cycle or missing producer among: {names}")
            for transform in ready:
                done.add(transform[0])
                ordered.append(transform)
            pending = [t for t in pending if t[0] not in done]
        return ordered

    def compute(self, sources: dict[str, int], holds: dict[str, int]) -> Watermarks:
        """Watermarks given the sources' output watermarks (by PCollection)
        and each transform's earliest hold (by transform name)."""
        inputs: dict[str, int] = {}
        marks: dict[str, int] = {}
        for name, reads, outputs in self._order:
            incoming = [marks[pc] for pc in reads]
            inputs[name] = min(incoming) if incoming else MAX_MICROS
            out = min(inputs[name], holds.get(name, MAX_MICROS))
            for pc in outputs:
                marks[pc] = sources.get(pc, out)
        return Watermarks(inputs, marks)

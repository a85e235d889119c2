"""Coders and windowing strategies shared by the driver and the executors.

The driver serialises the optimised pipeline's ``Components`` once; each
Python worker rebuilds a Beam ``PipelineContext`` from those bytes the first
time it needs one and keeps it, because unpickling coders per task is waste.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context

# Encoded output grows in chunks of about this size (bytes) per RDD element.
CHUNK_BYTES = 1 << 20


@functools.lru_cache(maxsize=16)
def context_from_bytes(components: bytes) -> pipeline_context.PipelineContext:
    """A PipelineContext over serialised Components, cached per process."""
    proto = beam_runner_api_pb2.Components.FromString(components)
    return pipeline_context.PipelineContext(proto)


def add_windowed_coders(components: beam_runner_api_pb2.Components) -> dict[str, str]:
    """Adds a WindowedValue coder for every PCollection; returns pcoll -> id.

    PCollections travel between Spark stages as windowed values, so every
    PCollection needs one, as the SDK's data channel expects.
    """
    by_pair: dict[tuple[str, str], str] = {}
    result: dict[str, str] = {}
    for pcoll_id, pcoll in components.pcollections.items():
        strategy = components.windowing_strategies[pcoll.windowing_strategy_id]
        pair = (pcoll.coder_id, strategy.window_coder_id)
        if pair not in by_pair:
            coder_id = f"spark_windowed_{len(by_pair)}_{pcoll.coder_id}"
            components.coders[coder_id].CopyFrom(
                beam_runner_api_pb2.Coder(
                    spec=beam_runner_api_pb2.FunctionSpec(
                        urn=common_urns.coders.WINDOWED_VALUE.urn
                    ),
                    component_coder_ids=list(pair),
                )
            )
            by_pair[pair] = coder_id
        result[pcoll_id] = by_pair[pair]
    return result


def decode_all(data: bytes, coder_impl: Any) -> Iterator[Any]:
    """Decodes concatenated nested encodings."""
    stream = create_InputStream(data)
    while stream.size() > 0:
        yield coder_impl.decode_from_stream(stream, True)


def encode_chunks(values: Iterable[Any], coder_impl: Any) -> Iterator[bytes]:
    """Encodes values into chunks of about CHUNK_BYTES each."""
    out = create_OutputStream()
    for value in values:
        coder_impl.encode_to_stream(value, out, True)
        if out.size() >= CHUNK_BYTES:
            yield out.get()
            out = create_OutputStream()
    if out.size():
        yield out.get()

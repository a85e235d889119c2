"""Keyed shuffles on RDDs of encoded windowed values.

A PCollection is an RDD of encoded chunks. Shuffles need one record per
element keyed by the element's encoded key, so the key's bytes (not Python
hash of decoded objects, which differs between worker processes) choose the
partition.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.transforms import trigger
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.components import context_from_bytes, decode_all, encode_chunks

_ONLY_FIRING = trigger.BatchGlobalTriggerDriver.ONLY_FIRING


def stable_partition(key: bytes) -> int:
    """Partition function over encoded keys, equal in every process."""
    return zlib.crc32(key)


def decode_with_bytes(chunk: bytes, impl: Any) -> Iterator[tuple[Any, bytes]]:
    # The element's own bytes are sliced out of the chunk rather than
    # re-encoded: the stream reports how much is left after each decode.
    stream = create_InputStream(chunk)
    total = len(chunk)
    while (left := stream.size()) > 0:
        value = impl.decode_from_stream(stream, True)
        yield value, chunk[total - left : total - stream.size()]


def key_elements(
    components: bytes, windowed_kv_coder_id: str, chunks: Iterable[bytes]
) -> Iterator[tuple[bytes, bytes]]:
    """Splits chunks of windowed KVs into (encoded key, encoded element)."""
    coder = context_from_bytes(components).coders[windowed_kv_coder_id]
    impl = coder.get_impl()
    key_impl = coder.wrapped_value_coder.key_coder().get_impl()
    for chunk in chunks:
        for wv, raw in decode_with_bytes(chunk, impl):
            yield key_impl.encode(wv.value[0]), raw


def split_elements(
    components: bytes, windowed_coder_id: str, chunks: Iterable[bytes]
) -> Iterator[bytes]:
    """Splits chunks into one encoded element each (for a reshuffle)."""
    impl = context_from_bytes(components).coders[windowed_coder_id].get_impl()
    for chunk in chunks:
        for _, raw in decode_with_bytes(chunk, impl):
            yield raw


def number_round_robin(partition: int, elements: Iterable[Any]) -> Iterator[tuple]:
    """Numbers elements from the partition's index, so partitions interleave."""
    return enumerate(elements, start=partition)


def round_robin_partition(number: int) -> int:
    """Partition function for ``number_round_robin``'s numbers."""
    return number


def _is_plain_batch(windowing: Any) -> bool:
    """Non-merging windows, default trigger, end-of-window timestamps.

    Then a batch grouping fires exactly once per key and window, which needs
    no trigger machinery (Beam's general driver costs tens of µs per key).
    """
    return (
        windowing.triggerfn == trigger.DefaultTrigger()
        and not windowing.windowfn.is_merging()
        and windowing.timestamp_combiner == TimestampCombiner.OUTPUT_AT_EOW
    )


def _group_plain(key: Any, values: Iterable[WindowedValue]) -> Iterator[WindowedValue]:
    by_window: dict = {}
    for wv in values:
        for window in wv.windows:
            by_window.setdefault(window, []).append(wv.value)
    for window, grouped in by_window.items():
        yield WindowedValue(
            (key, grouped), window.max_timestamp(), (window,), _ONLY_FIRING
        )


def group_by_key_and_window(
    components: bytes,
    input_coder_id: str,
    output_coder_id: str,
    windowing_strategy_id: str,
    groups: Iterable[tuple[bytes, Iterable[bytes]]],
) -> Iterator[bytes]:
    """Groups one partition's keys with Beam's batch trigger driver.

    The driver applies the windowing strategy: merging windows (sessions),
    triggers, accumulation mode and timestamp combiners.
    """
    context = context_from_bytes(components)
    in_coder = context.coders[input_coder_id]
    in_impl = in_coder.get_impl()
    key_impl = in_coder.wrapped_value_coder.key_coder().get_impl()
    windowing = context.windowing_strategies.get_by_id(windowing_strategy_id)
    # The default windowing too: Beam's batch driver for it stamps a group at
    # the start of time, where its end-of-window combiner (and Beam's own
    # FnApiRunner) puts it at the end of the global window.
    if _is_plain_batch(windowing):
        group = _group_plain
    else:
        group = trigger.create_trigger_driver(windowing, True).process_entire_key

    def grouped() -> Iterator[Any]:
        for key_bytes, encoded in groups:
            values = [
                wv.with_value(wv.value[1])
                for data in encoded
                for wv in decode_all(data, in_impl)
            ]
            yield from group(key_impl.decode(key_bytes), values)

    out_impl = context.coders[output_coder_id].get_impl()
    yield from encode_chunks(grouped(), out_impl)

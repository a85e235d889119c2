"""Materialising side inputs for the state API.

The driver collects a side input's encoded elements (the only PCollections
it ever collects), lays them out under the state keys the SDK will request
(iterable, or multimap by key, per window) and broadcasts them. Executors
preload them into each task's state servicer.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Iterable
from typing import Any

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.internal import pickler
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2

from runners.spark.components import decode_all
from runners.spark.plan import SideInput


def state_entries(
    side: SideInput, windowed_coder, chunks: Iterable[bytes]
) -> list[tuple[bytes, bytes]]:
    """(serialised StateKey, encoded values) pairs serving one side input."""
    impl = windowed_coder.get_impl()
    window_coder = windowed_coder.window_coder
    multimap = side.access_pattern == common_urns.side_inputs.MULTIMAP.urn
    if not multimap and side.access_pattern != common_urns.side_inputs.ITERABLE.urn:
        raise NotImplementedError(f"side input access pattern {side.access_pattern}")
    if multimap:
        key_impl = windowed_coder.wrapped_value_coder.key_coder().get_impl()
        value_impl = windowed_coder.wrapped_value_coder.value_coder().get_impl()
    else:
        value_impl = windowed_coder.wrapped_value_coder.get_impl()

    by_window_key: dict = collections.defaultdict(list)
    for chunk in chunks:
        for wv in decode_all(chunk, impl):
            key, value = wv.value if multimap else (None, wv.value)
            for window in wv.windows:
                by_window_key[window, key].append(value)

    entries = []
    for (window, key), values in by_window_key.items():
        out = create_OutputStream()
        for value in values:
            value_impl.encode_to_stream(value, out, True)
        data = out.get()
        encoded_window = window_coder.encode(window)
        if not multimap:
            state_key = beam_fn_api_pb2.StateKey(
                iterable_side_input=beam_fn_api_pb2.StateKey.IterableSideInput(
                    transform_id=side.transform_id,
                    side_input_id=side.tag,
                    window=encoded_window,
                )
            )
            entries.append((state_key.SerializeToString(), data))
            continue
        encoded_key = key_impl.encode_nested(key)
        entries.extend(
            _multimap_entries(side, encoded_window, encoded_key, data, len(values))
        )
    return entries


def _multimap_entries(
    side: SideInput, window: bytes, key: bytes, data: bytes, count: int
) -> list[tuple[bytes, bytes]]:
    sk = beam_fn_api_pb2.StateKey
    ids = {"transform_id": side.transform_id, "side_input_id": side.tag}
    return [
        (
            sk(
                multimap_side_input=sk.MultimapSideInput(window=window, key=key, **ids)
            ).SerializeToString(),
            data,
        ),
        (
            sk(
                multimap_keys_side_input=sk.MultimapKeysSideInput(window=window, **ids)
            ).SerializeToString(),
            key,
        ),
        (
            sk(
                multimap_keys_values_side_input=sk.MultimapKeysValuesSideInput(
                    window=window, **ids
                )
            ).SerializeToString(),
            # KV<K, Iterable<V>>: the key, the value count, the values.
            key + struct.pack(">i", count) + data,
        ),
    ]


class FirstPanes:
    """Which main-input windows a stage's side inputs can serve before their
    watermark has passed: Beam makes a side input whose windowing has a
    trigger of its own ready for a window once it has produced a pane for
    it (the slowly-changing side input over ``PeriodicImpulse`` in the
    global window relies on it). Side inputs on the default trigger wait
    for their watermark, as on Beam's DirectRunner; so does a stage that
    reads one of those beside triggered ones (a task knows only the
    smallest of its side inputs' watermarks).
    """

    def __init__(
        self,
        sides: list[SideInput],
        context: Any,
        entries: Iterable[tuple[bytes, bytes]],
    ) -> None:
        self._all_triggered = bool(sides) and all(s.triggered for s in sides)
        self._sides: list[tuple[SideInput, Any, Any]] = []
        # (side transform, side input, encoded window) holding data.
        self._present: set[tuple[str, str, bytes]] = set()
        if not self._all_triggered:
            # Only the watermark can make these side inputs ready.
            return
        self._sides = [
            (
                side,
                pickler.loads(
                    beam_runner_api_pb2.FunctionSpec.FromString(
                        side.window_mapping
                    ).payload
                ),
                context.coders[side.window_coder_id],
            )
            for side in sides
        ]
        for key, _ in entries:
            state_key = beam_fn_api_pb2.StateKey.FromString(key)
            cell = getattr(state_key, state_key.WhichOneof("type"))
            self._present.add((cell.transform_id, cell.side_input_id, cell.window))

    def ready(self, window: Any) -> bool:
        """Whether every side input has a pane for ``window``'s side window."""
        return self._all_triggered and all(
            (side.transform_id, side.tag, coder.encode(mapping(window)))
            in self._present
            for side, mapping, coder in self._sides
        )

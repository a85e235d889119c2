"""Drop records whose id was already seen for the same key: MillWheel's dedup.

MillWheel makes delivery exactly-once by giving each record a unique id and
checking it, per key, against the ids already processed: a Bloom filter
answers "definitely new" cheaply, the backing store answers the rest, and ids
are garbage-collected once their senders can no longer retry them. The
runner's own retries are already exactly-once in Beam; ``DedupByRecordId``
removes the duplicates that are present in the input itself (re-sent logs,
at-least-once sources, redundant injectors).

Keyed: input is ``(key, record)``; ids are compared within a key only, so
the key must be a function of the id (or the id unique per key). Like all
Beam state, it is also per window: apply it in the global window (before any
``WindowInto``) to dedup across windows.

Kept per key, in Beam state:

- ``ids``: the exact set of ``(bucket, record_id)`` seen, where ``bucket`` is
  the start (ms) of the ``bucket_ms``-wide event-time interval holding the
  record's timestamp.
- ``bloom``: a Bloom filter of the same ids, the fast path: an id it has
  never seen is new without reading ``ids``.

Timers: one event-time timer per (key, bucket), tagged with the bucket start,
set to ``bucket end + horizon_ms``. When the watermark passes it, the ids of
that bucket and any older one are forgotten and the Bloom filter is rebuilt
from the survivors; a key with no ids left holds no state at all. So an id is
remembered until the watermark is at least ``horizon_ms`` and at most
``horizon_ms + bucket_ms`` past its record's timestamp.

Duplicates are counted in the ``millwheel.dedup/duplicates`` counter and,
with ``emit_duplicates=True``, emitted on a ``duplicates`` output; false
Bloom hits are counted in ``millwheel.dedup/bloom_false_positives`` (to size
the filter). Unique records keep their timestamp and window.

After the horizon: a duplicate of a record whose id was already forgotten is
treated as new and emitted again. The horizon must therefore exceed the
longest delay with which a source can redeliver. A record that arrives when
the watermark is already past its own expiry is emitted as new (if unseen)
and its id is forgotten at the next watermark advance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.coders import BytesCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    SetStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp

from transforms.millwheel.bloom import BloomFilter
from transforms.millwheel.event_time import to_millis, to_timestamp

DUPLICATES = "duplicates"
METRICS_NAMESPACE = "millwheel.dedup"

RecordId = bytes | str | int


def _id_bytes(record_id: RecordId) -> bytes:
    if isinstance(record_id, bytes):
        return record_id
    if isinstance(record_id, str):
        return record_id.encode()
    if isinstance(record_id, int):
        return str(record_id).encode()
    raise TypeError(
        f"record_id_fn must return bytes, str or int, got {type(record_id).__name__}"
    )


class _DedupFn(beam.DoFn):
    """The per-key state machine behind ``DedupByRecordId`` (see module doc)."""

    IDS = SetStateSpec("ids", TupleCoder([VarIntCoder(), BytesCoder()]))
    BLOOM = ReadModifyWriteStateSpec("bloom", BytesCoder())
    GC = TimerSpec("gc", TimeDomain.WATERMARK)

    def __init__(
        self,
        record_id_fn: Callable[[Any], RecordId],
        horizon_ms: int,
        bucket_ms: int,
        bloom_capacity: int,
        bloom_false_positive_rate: float,
        emit_duplicates: bool,
    ) -> None:
        self._record_id_fn = record_id_fn
        self._horizon_ms = horizon_ms
        self._bucket_ms = bucket_ms
        layout = BloomFilter.for_capacity(bloom_capacity, bloom_false_positive_rate)
        self._bloom_bits, self._bloom_hashes = layout.num_bits, layout.num_hashes
        self._emit_duplicates = emit_duplicates
        self._duplicates = Metrics.counter(METRICS_NAMESPACE, "duplicates")
        self._false_positives = Metrics.counter(
            METRICS_NAMESPACE, "bloom_false_positives"
        )

    def _bloom(self, bits: bytes | None = None) -> BloomFilter:
        return BloomFilter(self._bloom_bits, self._bloom_hashes, bits)

    def process(
        self,
        element: tuple[Any, Any],
        timestamp=beam.DoFn.TimestampParam,
        ids=beam.DoFn.StateParam(IDS),
        bloom_state=beam.DoFn.StateParam(BLOOM),
        gc=beam.DoFn.TimerParam(GC),
    ) -> Iterator[Any]:
        record_id = _id_bytes(self._record_id_fn(element[1]))
        bloom = self._bloom(bloom_state.read())
        # Fast path: a Bloom miss proves the id is new, so `ids` is not read.
        if record_id in bloom:
            if any(seen == record_id for _, seen in ids.read()):
                self._duplicates.inc()
                if self._emit_duplicates:
                    yield pvalue.TaggedOutput(DUPLICATES, element)
                return
            self._false_positives.inc()
        bucket = self._bucket_of(timestamp)
        ids.add((bucket, record_id))
        bloom.add(record_id)
        bloom_state.write(bloom.to_bytes())
        # Re-setting the bucket's timer to the same time is a no-op, so every
        # record of a bucket may do it.
        gc.set(self._expiry(bucket), dynamic_timer_tag=str(bucket))
        yield element

    @on_timer(GC)
    def forget_expired(
        self,
        fired_at=beam.DoFn.TimestampParam,
        ids=beam.DoFn.StateParam(IDS),
        bloom_state=beam.DoFn.StateParam(BLOOM),
    ) -> None:
        kept = [
            (bucket, record_id)
            for bucket, record_id in ids.read()
            if self._expiry(bucket) > fired_at
        ]
        ids.clear()
        bloom_state.clear()
        if not kept:
            return
        bloom = self._bloom()
        for entry in kept:
            ids.add(entry)
            bloom.add(entry[1])
        bloom_state.write(bloom.to_bytes())

    def _bucket_of(self, timestamp: Timestamp) -> int:
        ms = to_millis(timestamp)
        return ms - ms % self._bucket_ms

    def _expiry(self, bucket: int) -> Timestamp:
        return to_timestamp(bucket + self._bucket_ms + self._horizon_ms)


class DedupOutputs(NamedTuple):
    """The outputs of ``DedupByRecordId(..., emit_duplicates=True)``."""

    unique: beam.PCollection
    duplicates: beam.PCollection


class DedupByRecordId(beam.PTransform):
    """Keep the first ``(key, record)`` per key and record id; drop the rest.

    ``record_id_fn(record)`` returns the record's id (bytes, str or int).
    Ids are remembered for ``horizon_ms`` of event time past their record's
    timestamp (up to ``bucket_ms`` more, default ``horizon_ms // 4``); see
    the module docstring for state, timers and what happens after the horizon.
    The Bloom filter is sized for ``bloom_capacity`` ids per key within the
    horizon at ``bloom_false_positive_rate``; it only affects speed, never
    results.

    Returns the unique records, or ``DedupOutputs(unique, duplicates)`` when
    ``emit_duplicates`` is true.
    """

    def __init__(
        self,
        record_id_fn: Callable[[Any], RecordId],
        horizon_ms: int,
        *,
        bucket_ms: int | None = None,
        bloom_capacity: int = 1000,
        bloom_false_positive_rate: float = 0.01,
        emit_duplicates: bool = False,
    ) -> None:
        super().__init__()
        if horizon_ms <= 0:
            raise ValueError(f"horizon_ms must be positive, got {horizon_ms}")
        bucket_ms = bucket_ms if bucket_ms is not None else max(1, horizon_ms // 4)
        if bucket_ms <= 0:
            raise ValueError(f"bucket_ms must be positive, got {bucket_ms}")
        self._emit_duplicates = emit_duplicates
        self._fn = _DedupFn(
            record_id_fn,
            horizon_ms,
            bucket_ms,
            bloom_capacity,
            bloom_false_positive_rate,
            emit_duplicates,
        )

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection | DedupOutputs:
        if not self._emit_duplicates:
            return pcoll | "Dedup" >> beam.ParDo(self._fn)
        outputs = pcoll | "Dedup" >> beam.ParDo(self._fn).with_outputs(
            DUPLICATES, main="unique"
        )
        return DedupOutputs(outputs.unique, outputs[DUPLICATES])

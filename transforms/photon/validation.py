"""Guarding the join's inputs: events it cannot key, time or store go to dead
letters.

Events read by ``transforms.records`` have their fields already; this guards
the in-memory path (events built by another job or a test), where a missing
id or event time would otherwise be joined under an empty key or never time
out. It also refuses ids Bigtable cannot hold, before anything is written:
a query id becomes an event-store row key (at most 4 KiB) and a click id a
registry column qualifier (at most 16 KiB); one over the limit would fail
the bundle that writes it, and so the job. Stateless and not keyed.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.photon import event_store
from transforms.photon.event_store import METRICS_NAMESPACE
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.lines import RAW_LIMIT_BYTES
from transforms.records.parse import event_time_problem
from transforms.records.photon_pb2 import ClickEvent, QueryEvent

DEAD_LETTERS = "dead_letters"
DEAD_LETTER_SOURCE = "PhotonJoin"

_REQUIRED = {
    "QueryEvent": ("query_id", "event_time"),
    "ClickEvent": ("click_id", "query_id", "event_time"),
}
# Bigtable's limits on a row key and on a column qualifier, in bytes.
MAX_ROW_KEY_BYTES = 4 * 1024
MAX_QUALIFIER_BYTES = 16 * 1024


def problem(event: QueryEvent | ClickEvent) -> str | None:
    """Why ``event`` cannot be joined, or None if it can."""
    for name in _REQUIRED[event.DESCRIPTOR.name]:
        value = getattr(event, name)
        if not event.HasField(name) or (isinstance(value, str) and not value.strip()):
            return f"missing field {name!r}"
    # Seconds or microseconds where milliseconds are meant would put a click
    # decades past the registry's GC horizon, or centuries ahead of it.
    return event_time_problem(event.event_time) or _too_long(event)


def _too_long(event: QueryEvent | ClickEvent) -> str | None:
    """Why an id of ``event`` does not fit in Bigtable, or None."""
    key = len(event_store.row_key(event.query_id))
    if key > MAX_ROW_KEY_BYTES:
        return (
            f"field 'query_id' makes an event-store row key of {key:,} bytes, "
            f"over Bigtable's limit of {MAX_ROW_KEY_BYTES:,}"
        )
    if isinstance(event, ClickEvent):
        qualifier = len(event.click_id.encode())
        if qualifier > MAX_QUALIFIER_BYTES:
            return (
                f"field 'click_id' is {qualifier:,} bytes, over Bigtable's "
                f"column qualifier limit of {MAX_QUALIFIER_BYTES:,}"
            )
    return None


class ValidateEvents(beam.DoFn):
    """Passes joinable events of ``record_type`` through; the rest become
    ``DeadLetter``s.

    Dead letters carry the serialized event as ``raw`` (an element that is
    not a ``record_type`` at all, its repr) and are counted in
    ``millwheel.photon/dead_letters``.
    """

    def __init__(self, record_type: type[QueryEvent] | type[ClickEvent]) -> None:
        self._record_type = record_type
        self._dead = Metrics.counter(METRICS_NAMESPACE, "dead_letters")

    def process(
        self, event: QueryEvent | ClickEvent
    ) -> Iterator[QueryEvent | ClickEvent | beam.pvalue.TaggedOutput]:
        if not isinstance(event, self._record_type):
            # A click in the query stream, a dict: not one bad record of the
            # stream's kind, but a stream that cannot be joined as it is.
            expected = self._record_type.__name__
            reason = f"expected a {expected}, got a {type(event).__name__}"
            yield self._dead_letter(repr(event).encode(), reason)
            return
        reason = problem(event)
        if reason is None:
            yield event
            return
        yield self._dead_letter(event.SerializeToString(), reason)

    def _dead_letter(self, raw: bytes, reason: str) -> beam.pvalue.TaggedOutput:
        self._dead.inc()
        letter = DeadLetter(
            source=DEAD_LETTER_SOURCE,
            raw=raw[:RAW_LIMIT_BYTES],
            reason=reason,
            record_type=self._record_type.__name__,
        )
        return beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)

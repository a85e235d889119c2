"""Guarding the join's inputs: events it cannot key or time go to dead letters.

Events read by ``transforms.records`` are valid already; this guards the
in-memory path (events built by another job or a test), where a missing id
or event time would otherwise be joined under an empty key or never time
out. Stateless and not keyed.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.photon.event_store import METRICS_NAMESPACE
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.photon_pb2 import ClickEvent, QueryEvent

DEAD_LETTERS = "dead_letters"
DEAD_LETTER_SOURCE = "PhotonJoin"

_REQUIRED = {
    "QueryEvent": ("query_id", "event_time"),
    "ClickEvent": ("click_id", "query_id", "event_time"),
}


def problem(event: QueryEvent | ClickEvent) -> str | None:
    """Why ``event`` cannot be joined, or None if it can."""
    for name in _REQUIRED[event.DESCRIPTOR.name]:
        value = getattr(event, name)
        if not event.HasField(name) or (isinstance(value, str) and not value.strip()):
            return f"missing field {name!r}"
    return None


class ValidateEvents(beam.DoFn):
    """Passes joinable events through; the rest become ``DeadLetter``s.

    Dead letters carry the serialized event as ``raw`` and are counted in
    ``millwheel.photon/dead_letters``.
    """

    def __init__(self) -> None:
        self._dead = Metrics.counter(METRICS_NAMESPACE, "dead_letters")

    def process(
        self, event: QueryEvent | ClickEvent
    ) -> Iterator[QueryEvent | ClickEvent | beam.pvalue.TaggedOutput]:
        reason = problem(event)
        if reason is None:
            yield event
            return
        self._dead.inc()
        letter = DeadLetter(
            source=DEAD_LETTER_SOURCE,
            raw=event.SerializeToString(),
            reason=reason,
            record_type=event.DESCRIPTOR.name,
        )
        yield beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)

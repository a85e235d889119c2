"""Searches keyed by their normalised query; unusable ones to dead letters."""

from collections.abc import Callable
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.dead_letters import DEAD_LETTERS
from transforms.records.lines import RAW_LIMIT_BYTES
from transforms.records.parse import event_time_problem
from transforms.records.zeitgeist_pb2 import SearchQuery

DEAD_LETTER_SOURCE = "Zeitgeist"
EMPTY_KEY = "query is empty after normalization"


def dead_search(search: SearchQuery, reason: str) -> beam.pvalue.TaggedOutput:
    """`search` as a `DEAD_LETTERS` output, counted."""
    Metrics.counter("millwheel.zeitgeist", "dead_letters").inc()
    return beam.pvalue.TaggedOutput(
        DEAD_LETTERS,
        DeadLetter(
            source=DEAD_LETTER_SOURCE,
            raw=search.SerializeToString(),
            reason=reason,
            record_type="SearchQuery",
        ),
    )


class KeyByQuery(beam.DoFn):
    """`SearchQuery` to `(key, SearchQuery)`; unusable searches to dead letters.

    Searches read by `transforms.records` are already valid; this guards the
    in-memory path (records built by another job or a test), where an empty
    key or a negative count would corrupt the counts without a trace.
    """

    def __init__(self, key_fn: Callable[[str], str]):
        self._key_fn = key_fn

    def process(self, search: SearchQuery):
        if not isinstance(search, SearchQuery):
            yield _dead_element(search)
            return
        reason = None
        key = self._key_fn(search.query)
        if not key:
            reason = EMPTY_KEY
        elif search.count < 0:
            reason = f"count must be a non-negative integer, got {search.count}"
        elif not search.HasField("event_time"):
            reason = "missing field 'event_time'"
        else:
            reason = event_time_problem(search.event_time)
        if reason is None:
            yield key, search
        else:
            yield dead_search(search, reason)


def _dead_element(element: Any) -> beam.pvalue.TaggedOutput:
    """An element that is not a `SearchQuery` at all, as a counted dead letter
    (its repr as the raw record: it may have no serialised form)."""
    Metrics.counter("millwheel.zeitgeist", "dead_letters").inc()
    kind = type(element).__name__
    return beam.pvalue.TaggedOutput(
        DEAD_LETTERS,
        DeadLetter(
            source=DEAD_LETTER_SOURCE,
            raw=repr(element).encode()[:RAW_LIMIT_BYTES],
            reason=f"expected a SearchQuery, got a {kind}",
            record_type="SearchQuery",
        ),
    )

"""What a reader's pipeline gave, in comparable form, for the reader tests."""

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from transforms.records.readers import DEAD_LETTERS


def letters(outputs, label="Letters"):
    """Dead letters as comparable (source, location, reason, raw, record_type)."""
    return outputs[DEAD_LETTERS] | label >> beam.Map(
        lambda d: (d.source, d.location, d.reason, d.raw, d.record_type)
    )


def counters(result) -> dict[str, int]:
    """The non-zero `millwheel.records` counters of a finished run."""
    query = MetricsFilter().with_namespace("millwheel.records")
    totals: dict[str, int] = {}
    for counter in result.metrics().query(query)["counters"]:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + counter.committed
    return {name: total for name, total in totals.items() if total}


def search_tuple(search):
    """A `SearchQuery` as comparable (query, event_time, count, record_id),
    unset fields None, as a table row of `SEARCH_SCHEMA` reads."""
    return (
        search.query,
        search.event_time,
        search.count if search.HasField("count") else None,
        search.record_id if search.HasField("record_id") else None,
    )

"""The event store: query events by query id, in Bigtable.

The joiner keeps each query in Beam state only for a TTL; the event store is
the long-term copy behind that cache. The pipeline writes every query event
into it from the query stream (``WriteToEventStore``), and the joiner looks a
query up there when a click has waited ``max_wait`` without finding its query
in state (typically because the query left the state long ago).

Rows: key ``deterministic_row_key(query_id)`` (hash prefix, so sequential
ids spread across tablets), one cell ``event:query`` holding the serialized
``QueryEvent`` with the event time as cell timestamp. Writes are weak
productions: a rewrite of the same event lands on the same cell version, so
retried bundles and redundant pipelines writing the same log are harmless.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from google.cloud.bigtable.data import (
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_tables import (
    EVENTS_FAMILY,
    events_table,
)
from transforms.millwheel.productions import deterministic_row_key
from transforms.photon.bigtable_retry import call_with_retries, open_table, within
from transforms.photon.params import BigtableTarget
from transforms.records.photon_pb2 import QueryEvent

QUERY_COLUMN = b"query"
METRICS_NAMESPACE = "millwheel.photon"


def row_key(query_id: str) -> bytes:
    """The event-store row of ``query_id``."""
    return deterministic_row_key(query_id)


class EventStore:
    """Reads and writes query events in ``target.events_table``.

    Holds a data client: create it in ``DoFn.setup`` and ``close`` it in
    ``teardown``. Creates the table on first use.
    """

    def __init__(self, target: BigtableTarget) -> None:
        self._client, self._table = open_table(
            target, events_table(target.events_table)
        )
        self._table_id = target.events_table
        self._deadline_s = target.deadline_s
        self._latest = rf.RowFilterChain(
            [
                rf.FamilyNameRegexFilter(EVENTS_FAMILY),
                rf.ColumnQualifierRegexFilter(QUERY_COLUMN),
                rf.CellsColumnLimitFilter(1),
            ]
        )

    def close(self) -> None:
        self._client.close()

    def put_many(self, queries: Iterable[QueryEvent]) -> int:
        """Write the queries in one ``MutateRows``; the number written."""
        entries = [
            RowMutationEntry(
                row_key(query.query_id),
                SetCell(
                    EVENTS_FAMILY,
                    QUERY_COLUMN,
                    query.SerializeToString(),
                    # Explicit timestamp: a rewrite replaces, never adds.
                    timestamp_micros=query.event_time * 1000,
                ),
            )
            for query in queries
        ]
        if entries:
            call_with_retries(
                self._table_id,
                "MutateRows (store queries)",
                lambda left: self._table.bulk_mutate_rows(entries, **within(left)),
                self._deadline_s,
            )
        return len(entries)

    def get(self, query_id: str) -> QueryEvent | None:
        """The stored query event of ``query_id``, or None."""
        return self.get_many([query_id]).get(query_id)

    def get_many(self, query_ids: Sequence[str]) -> dict[str, QueryEvent]:
        """The stored query events of ``query_ids`` that exist, in one
        ``ReadRows`` (the joiner settles a whole timer slot at once)."""
        by_key = {row_key(query_id): query_id for query_id in query_ids}
        if not by_key:
            return {}
        query = ReadRowsQuery(row_keys=list(by_key), row_filter=self._latest)
        rows = call_with_retries(
            self._table_id,
            "ReadRows (look up queries)",
            lambda left: list(self._table.read_rows(query, **within(left))),
            self._deadline_s,
        )
        found = {}
        for row in rows:
            cells = row.get_cells(EVENTS_FAMILY, QUERY_COLUMN)
            if cells:
                found[by_key[row.row_key]] = QueryEvent.FromString(cells[0].value)
        return found


class WriteToEventStore(beam.DoFn):
    """Writes each ``QueryEvent`` to the event store; outputs nothing.

    Not keyed and stateless: events are buffered per bundle and written with
    one ``MutateRows`` per ``max_batch`` events and at the end of the bundle,
    so a bundle's writes are done before it commits. Counted in
    ``millwheel.photon/queries_stored``.
    """

    def __init__(self, target: BigtableTarget, max_batch: int = 500) -> None:
        self._target = target
        self._max_batch = max_batch
        self._stored = Metrics.counter(METRICS_NAMESPACE, "queries_stored")

    def setup(self) -> None:
        self._store = EventStore(self._target)

    def start_bundle(self) -> None:
        self._buffer: list[QueryEvent] = []

    def process(self, query: QueryEvent) -> None:
        self._buffer.append(query)
        if len(self._buffer) >= self._max_batch:
            self._flush()

    def finish_bundle(self) -> None:
        self._flush()

    def _flush(self) -> None:
        self._stored.inc(self._store.put_many(self._buffer))
        self._buffer = []

    def teardown(self) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()

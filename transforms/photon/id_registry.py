"""The id registry: which pipeline joined each click, so that it is output once.

Photon's central guarantee is that a click is joined at most once across
every pipeline ("datacenter") joining the same logs. Before a joined click is
output, its id is registered in a Bigtable table shared by all pipelines:

- ``register(click_id, token)`` inserts the row ``click_id -> token`` if the
  row is absent, with one ``CheckAndMutateRow`` (predicate "a token cell
  exists", mutation only in the false case), so two pipelines racing for
  one click cannot both win.
- If the row exists with the same token, the registration succeeds again
  (``ALREADY_MINE``): a retried bundle, or a retried RPC whose first answer
  was lost, is idempotent.
- If it exists with another token, the click was joined elsewhere
  (``DUPLICATE``): the caller drops its copy and counts a wasted join.

Row keys carry a hash prefix (``deterministic_row_key``), so sequential
click ids spread across tablets. Registrations are batched: ``register_many``
keeps up to ``max_in_flight`` conditional inserts in flight (see
``bigtable_rpc``), then reads the owners of the rows that already existed in
one ``ReadRows``.

Garbage collection is Bigtable's (``id_registry_table(gc_days)``: cells older
than N days go). Cells carry the wall-clock time of registration, so an entry
lives at least N days past its click's event time; clicks older than that
horizon must be rejected before registering (``older_than_horizon``), since
their earlier registration may be gone.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Sequence

from google.cloud.bigtable.data import (
    BigtableDataClient,
    DeleteAllFromRow,
    ReadRowsQuery,
)
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_tables import (
    ID_REGISTRY_FAMILY,
    ensure_table,
    id_registry_table,
)
from transforms.millwheel.productions import deterministic_row_key
from transforms.photon.bigtable_rpc import (
    ConditionalWrite,
    MutationPb,
    PipelinedCheckAndMutate,
    RowFilterPb,
    open_channel,
)
from transforms.photon.params import DAY_MS, BigtableTarget

TOKEN_COLUMN = b"token"
_READ_CHUNK = 1000
_MAX_ROUNDS = 3


class Outcome(enum.Enum):
    """The answer to one registration."""

    REGISTERED = "registered"  # inserted now: this caller owns the click
    ALREADY_MINE = "already_mine"  # registered before with the same token
    DUPLICATE = "duplicate"  # registered by another token: a wasted join

    @property
    def owned(self) -> bool:
        return self is not Outcome.DUPLICATE


def row_key(click_id: str) -> bytes:
    """The registry row of ``click_id``: hash prefix, then the id."""
    return deterministic_row_key(click_id)


def older_than_horizon(event_time_ms: int, now_ms: int, gc_days: int) -> str | None:
    """Why a click at ``event_time_ms`` may not be registered at ``now_ms``,
    or None if it may."""
    age_ms = now_ms - event_time_ms
    if age_ms <= gc_days * DAY_MS:
        return None
    return (
        f"click is {age_ms / DAY_MS:.1f} days old, past the id registry's "
        f"GC horizon of {gc_days} days"
    )


class IdRegistry:
    """Registrations of click ids in ``target.registry_table``.

    Opens a gRPC channel and a data client; create it in ``DoFn.setup`` (it
    does not pickle) and ``close`` it in ``teardown``. Creates the table with
    its GC rule on first use. Thread-compatible, not thread-safe.
    """

    def __init__(
        self, target: BigtableTarget, gc_days: int, *, max_in_flight: int = 128
    ) -> None:
        ensure_table(
            target.project,
            target.instance_id,
            id_registry_table(gc_days, target.registry_table),
        )
        table_name = (
            f"projects/{target.project}/instances/{target.instance_id}"
            f"/tables/{target.registry_table}"
        )
        self._channel = open_channel()
        self._writes = PipelinedCheckAndMutate(
            self._channel, table_name, max_in_flight=max_in_flight
        )
        self._client = BigtableDataClient(project=target.project)
        self._table = self._client.get_table(target.instance_id, target.registry_table)

    def close(self) -> None:
        self._client.close()
        self._channel.close()

    def register(self, click_id: str, token: str) -> Outcome:
        """Register one click id (one round trip; see ``register_many``)."""
        return self.register_many([click_id], token)[0]

    def register_many(self, click_ids: Sequence[str], token: str) -> list[Outcome]:
        """Register each id for ``token``; the outcomes, in order.

        Ids should be distinct within one call. An id whose row vanishes
        between the insert and the owner lookup (released or collected in
        between) is registered again.
        """
        outcomes: list[Outcome | None] = [None] * len(click_ids)
        todo = list(range(len(click_ids)))
        for _ in range(_MAX_ROUNDS):
            if not todo:
                break
            todo = self._register_round(click_ids, token, todo, outcomes)
        if todo:
            raise RuntimeError(
                f"{len(todo)} registrations kept vanishing; is something "
                "deleting registry rows concurrently?"
            )
        return outcomes  # type: ignore[return-value]

    def _register_round(
        self,
        click_ids: Sequence[str],
        token: str,
        todo: list[int],
        outcomes: list[Outcome | None],
    ) -> list[int]:
        value = token.encode()
        inserts = [self._insert_if_absent(click_ids[i], value) for i in todo]
        matched = self._writes.run(inserts)
        existed = [i for i, hit in zip(todo, matched, strict=True) if hit]
        for i in todo:
            outcomes[i] = Outcome.REGISTERED
        owners = self.owners(click_ids[i] for i in existed)
        vanished = []
        for i in existed:
            owner = owners.get(click_ids[i])
            if owner is None:
                vanished.append(i)
            else:
                mine = owner == token
                outcomes[i] = Outcome.ALREADY_MINE if mine else Outcome.DUPLICATE
        return vanished

    def _insert_if_absent(self, click_id: str, token: bytes) -> ConditionalWrite:
        # Millisecond timestamps: Bigtable's default granularity.
        now_micros = time.time_ns() // 1_000_000 * 1000
        mutation = MutationPb()
        cell = mutation.set_cell
        cell.family_name = ID_REGISTRY_FAMILY
        cell.column_qualifier = TOKEN_COLUMN
        cell.value = token
        cell.timestamp_micros = now_micros
        return ConditionalWrite(row_key(click_id), _TOKEN_CELL_PB, if_false=(mutation,))

    def owners(self, click_ids: Iterable[str]) -> dict[str, str]:
        """The token each registered id is held by; unregistered ids are absent."""
        by_key = {row_key(click_id): click_id for click_id in click_ids}
        keys = list(by_key)
        found: dict[str, str] = {}
        for start in range(0, len(keys), _READ_CHUNK):
            query = ReadRowsQuery(
                row_keys=keys[start : start + _READ_CHUNK], row_filter=_token_cell()
            )
            for row in self._table.read_rows(query):
                cells = row.get_cells(ID_REGISTRY_FAMILY, TOKEN_COLUMN)
                if cells:
                    found[by_key[row.row_key]] = cells[0].value.decode()
        return found

    def release(self, click_id: str, token: str) -> bool:
        """Delete ``click_id``'s registration iff ``token`` holds it.

        Used by verification to hand a click that was registered but never
        output back to the join; conditional, so a registration taken over
        by someone else in the meantime is left alone.
        """
        held_by_token = rf.RowFilterChain(
            [_token_cell(), rf.LiteralValueFilter(token.encode())]
        )
        return self._table.check_and_mutate_row(
            row_key(click_id), held_by_token, true_case_mutations=[DeleteAllFromRow()]
        )


def _token_cell() -> rf.RowFilter:
    return rf.RowFilterChain(
        [
            rf.FamilyNameRegexFilter(ID_REGISTRY_FAMILY),
            rf.ColumnQualifierRegexFilter(TOKEN_COLUMN),
            rf.CellsColumnLimitFilter(1),
        ]
    )


def _token_cell_pb():
    """``_token_cell`` as the API's protobuf, for the raw-channel requests."""
    predicate = RowFilterPb()
    filters = predicate.chain.filters
    filters.add(family_name_regex_filter=ID_REGISTRY_FAMILY)
    filters.add(column_qualifier_regex_filter=TOKEN_COLUMN)
    filters.add(cells_per_column_limit_filter=1)
    return predicate


_TOKEN_CELL_PB = _token_cell_pb()

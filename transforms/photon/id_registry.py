"""The id registry: which pipeline joined each click, so that it is output once.

Photon's central guarantee is that a click is joined at most once across
every pipeline ("datacenter") joining the same logs. Before a joined click is
output, its id is registered in a Bigtable table shared by all pipelines.

Layout (``RegistryLayout``): a row holds many clicks, those of one hash
bucket of the click id and one slice of the click's event time; the column
qualifier is the click id and the cell value the registering token. The row
is a function of the click alone, so every pipeline registers a click in the
same cell.

Registering a batch (``register_many``), as Photon's IdRegistry batches many
registrations into one transaction:

- the batch is grouped by row, and each row gets one ``CheckAndMutateRow``
  whose predicate matches if any of the group's columns exists and whose
  false branch sets all of them. Bigtable applies it atomically on the row,
  so two pipelines racing for a click cannot both win it;
- a row whose predicate did not match: every id of the group is
  ``REGISTERED``;
- a row whose predicate matched: the group's columns are read. An id held
  by the same token is ``ALREADY_MINE`` (a retried bundle or a retried RPC
  is idempotent), one held by another occurrence of the click under the
  same pipeline token is ``REPEATED`` (a duplicate the joiner no longer
  remembered), one held by another pipeline is ``DUPLICATE`` (the caller
  drops its copy and counts a wasted join), and the rest are sent again the
  same way, for a bounded number of rounds.

A click's token is its pipeline's token, followed by ``#`` and what tells
this join of the click from another: its occurrence, which the joiner gives
only to a click it may have forgotten before (see ``joiner``), and a digest
of the query it was joined with. So a retry of a click, whichever copy
carries it, registers alike, while a copy accepted after the joiner forgot
an earlier one does not, nor a copy of the click id logged with another
query id (the joiner remembers click ids per query, so it makes one join
for each query id the click names, and only one may be output).

One id alone (``register``) is the same write with a one-column predicate.

Every pipeline sharing a registry must use the same layout, or one click
could map to two rows and be won twice. The table records the layout of the
first registry that opens it (``LAYOUT_ROW``); a registry with another
layout refuses to start. Each registry that opens the table rewrites the
record, so it ages out under GC only once no pipeline has opened the
registry for ``gc_days``, and by then no registration it described is left.

Garbage collection is Bigtable's (``id_registry_table(gc_days)``: cells older
than N days go), cell by cell. Cells carry the wall-clock time of
registration, or the click's event time if that is later (``_cell_micros``),
so an entry lives at least N days past its click's event time; clicks older
than that horizon must be rejected before registering
(``older_than_horizon``), since their earlier registration may be gone.
A click dated ahead of the clock (a skewed client) would otherwise outlive
its registration: GC'd N days after it was registered, a copy could still
be young enough to register again.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, TypeVar

from google.cloud.bigtable.data import (
    DeleteRangeFromColumn,
    ReadRowsQuery,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_tables import (
    ID_REGISTRY_FAMILY,
    id_registry_table,
)
from transforms.millwheel.productions import deterministic_row_key
from transforms.photon.bigtable_retry import call_with_retries, open_table, within
from transforms.photon.bigtable_rpc import (
    ConditionalWrite,
    PipelinedCheckAndMutate,
    any_column_predicate,
    open_channel,
    set_cell,
)
from transforms.photon.params import BigtableTarget, RegistryLayout
from transforms.photon.registry_gc import check_gc_horizon

T = TypeVar("T")

_READ_CHUNK = 500
_MAX_ROUNDS = 10
# Ids per conditional write: bounds the size of one request's predicate (a
# union of exact columns, narrowed first to the range the sorted ids span).
COLUMNS_PER_WRITE = 128
# The row recording the table's layout. Click rows start with four hex
# digits (``deterministic_row_key``), so this key is never a click's row.
LAYOUT_ROW = b"~layout"
_LAYOUT_COLUMN = b"layout"


class LayoutMismatch(ValueError):
    """The registry table was laid out differently by another pipeline."""


class Outcome(enum.Enum):
    """The answer to one registration."""

    REGISTERED = "registered"  # inserted now: this caller owns the click
    ALREADY_MINE = "already_mine"  # registered before with the same token
    REPEATED = "repeated"  # another occurrence, same pipeline: a duplicate click
    DUPLICATE = "duplicate"  # registered by another pipeline: a wasted join

    @property
    def owned(self) -> bool:
        return self in (Outcome.REGISTERED, Outcome.ALREADY_MINE)


class ClickRef(NamedTuple):
    """What the registry needs of a click: its id and its event time, which
    together choose the registry row, which occurrence of the click this is
    (``JoinedClick.occurrence``; usually empty), and the query it is joined
    with (empty where none is: a registry's own tests and benchmarks)."""

    click_id: str
    event_time_ms: int
    occurrence: str = ""
    query_id: str = ""


def occurrence_token(token: str, click: ClickRef) -> str:
    """The token ``click`` is registered under by the pipeline ``token``."""
    marks = [click.occurrence] if click.occurrence else []
    if click.query_id:
        digest = hashlib.blake2b(click.query_id.encode(), digest_size=4).hexdigest()
        marks.append(f"q{digest}")
    return f"{token}#{'.'.join(marks)}" if marks else token


def pipeline_token(holder: str) -> str:
    """The token of the pipeline holding a click under ``holder``: the
    holder without the occurrence ``occurrence_token`` may have added (a
    pipeline's token has no ``#``)."""
    return holder.partition("#")[0]


def row_key(click: ClickRef, layout: RegistryLayout) -> bytes:
    """The registry row of ``click``: its id's hash bucket and its time slice,
    behind a hash prefix so that one slice's rows spread across tablets."""
    digest = hashlib.blake2b(click.click_id.encode(), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % layout.buckets
    return deterministic_row_key(bucket, click.event_time_ms // layout.slice_ms)


# Per row: column qualifier (click id) -> positions of that id in the batch.
_Groups = dict[bytes, dict[bytes, list[int]]]


class IdRegistry:
    """Registrations of click ids in ``target.registry_table``.

    Opens a gRPC channel and a data client; create it in ``DoFn.setup`` (it
    does not pickle) and ``close`` it in ``teardown``. Creates the table with
    its GC rule on first use. Thread-compatible, not thread-safe.
    """

    def __init__(
        self,
        target: BigtableTarget,
        gc_days: int,
        *,
        layout: RegistryLayout = RegistryLayout(),
        max_in_flight: int = 128,
        columns_per_write: int = COLUMNS_PER_WRITE,
    ) -> None:
        self._client, self._table = open_table(
            target, id_registry_table(gc_days, target.registry_table)
        )
        self._table_id = target.registry_table
        self._deadline_s = target.deadline_s
        self._layout = layout
        self._columns_per_write = columns_per_write
        self._channel = open_channel()
        self._writes = PipelinedCheckAndMutate(
            self._channel,
            f"projects/{target.project}/instances/{target.instance_id}"
            f"/tables/{target.registry_table}",
            max_in_flight=max_in_flight,
            deadline_s=target.deadline_s,
        )
        try:
            check_gc_horizon(target, gc_days)
            self._claim_layout(target.registry_table)
        except BaseException:
            self.close()
            raise

    def _claim_layout(self, table_name: str) -> None:
        """Records this layout in the table if none is, else checks it."""
        mine = _layout_value(self._layout)
        now_micros = time.time_ns() // 1_000_000 * 1000  # Bigtable's granularity
        record = SetCell(ID_REGISTRY_FAMILY, _LAYOUT_COLUMN, mine, now_micros)
        # Written only if absent: of two pipelines starting together, the
        # first write wins and the other reads it below.
        self._call(
            "CheckAndMutateRow (layout)",
            lambda left: self._table.check_and_mutate_row(
                LAYOUT_ROW,
                _column(_LAYOUT_COLUMN),
                false_case_mutations=[record],
                operation_timeout=left,
            ),
        )
        row = self._call(
            "ReadRow (layout)",
            lambda left: self._table.read_row(
                LAYOUT_ROW, row_filter=_latest_cells(), **within(left)
            ),
        )
        cells = row.get_cells(ID_REGISTRY_FAMILY, _LAYOUT_COLUMN) if row else []
        recorded = cells[0].value if cells else None
        if recorded is not None and recorded != mine:
            raise LayoutMismatch(
                f"id registry table {table_name!r} is laid out as "
                f"{recorded.decode()}, this pipeline as {mine.decode()}: every "
                "pipeline sharing a registry must use the same layout "
                "(registry.buckets and registry.slice_minutes in its config), "
                "or a click could be joined twice"
            )
        # Rewritten to keep it ahead of GC.
        self._call(
            "MutateRow (layout)",
            lambda left: self._table.mutate_row(LAYOUT_ROW, record, **within(left)),
        )

    def _call(self, operation: str, call: Callable[[float], T]) -> T:
        return call_with_retries(self._table_id, operation, call, self._deadline_s)

    def close(self) -> None:
        self._client.close()
        self._channel.close()

    def register(self, click: ClickRef, token: str) -> Outcome:
        """Register one click: one conditional write on its row."""
        return self.register_many([click], token)[0]

    def register_many(self, clicks: Sequence[ClickRef], token: str) -> list[Outcome]:
        """Register each click for the pipeline ``token``; the outcomes, in order.

        One conditional write per registry row the batch touches (see the
        module docstring). A click listed twice as the same occurrence gets
        the same outcome twice; of two occurrences of one click id, the first
        listed is registered and the other is ``REPEATED``. An id that is
        neither settled nor left free after ``_MAX_ROUNDS`` rounds (something
        keeps deleting registry cells) raises.
        """
        outcomes: list[Outcome | None] = [None] * len(clicks)
        tokens = [occurrence_token(token, c).encode() for c in clicks]
        pending = self._group(clicks)
        for _ in range(_MAX_ROUNDS):
            if not pending:
                return outcomes  # type: ignore[return-value]
            pending = self._register_round(
                pending, token.encode(), tokens, clicks, outcomes
            )
        left = sum(len(ids) for ids in pending.values())
        raise RuntimeError(
            f"{left} registrations were still contested after {_MAX_ROUNDS} "
            "rounds; is something deleting registry cells concurrently?"
        )

    def _group(self, clicks: Sequence[ClickRef]) -> _Groups:
        groups: _Groups = {}
        for i, click in enumerate(clicks):
            columns = groups.setdefault(row_key(click, self._layout), {})
            columns.setdefault(click.click_id.encode(), []).append(i)
        return groups

    def _register_round(
        self,
        pending: _Groups,
        pipeline: bytes,
        tokens: list[bytes],
        clicks: Sequence[ClickRef],
        outcomes: list[Outcome | None],
    ) -> _Groups:
        """One conditional write per row (per chunk of a large row); settles
        what it can and returns the groups to try again."""
        now_ms = time.time_ns() // 1_000_000
        chunks = [
            (row, qualifiers[start : start + self._columns_per_write])
            for row, columns in pending.items()
            for qualifiers in [sorted(columns)]
            for start in range(0, len(qualifiers), self._columns_per_write)
        ]
        writes = [
            ConditionalWrite(
                row,
                any_column_predicate(ID_REGISTRY_FAMILY, qualifiers),
                if_false=[
                    # An id's first listed occurrence is the one written.
                    set_cell(
                        ID_REGISTRY_FAMILY,
                        q,
                        tokens[first],
                        _cell_micros(clicks[first], now_ms),
                    )
                    for q in qualifiers
                    for first in [pending[row][q][0]]
                ],
            )
            for row, qualifiers in chunks
        ]
        contested: _Groups = {}
        matched = self._writes.run(writes)
        for (row, qualifiers), hit in zip(chunks, matched, strict=True):
            for qualifier in qualifiers:
                positions = pending[row][qualifier]
                if hit:
                    contested.setdefault(row, {})[qualifier] = positions
                else:
                    written = tokens[positions[0]]
                    for i in positions:
                        outcomes[i] = (
                            Outcome.REGISTERED
                            if tokens[i] == written
                            else Outcome.REPEATED
                        )
        holders = self._holders(contested)
        retry: _Groups = {}
        for row, columns in contested.items():
            for qualifier, positions in columns.items():
                holder = holders.get((row, qualifier))
                if holder is None:  # free when read: try again
                    retry.setdefault(row, {})[qualifier] = positions
                    continue
                for i in positions:
                    outcomes[i] = _held_outcome(holder, tokens[i], pipeline)
        return retry

    def _holders(self, groups: _Groups) -> dict[tuple[bytes, bytes], bytes]:
        """The token holding each column of ``groups``, for those held."""
        found: dict[tuple[bytes, bytes], bytes] = {}
        keys = list(groups)
        for start in range(0, len(keys), _READ_CHUNK):
            query = ReadRowsQuery(
                row_keys=keys[start : start + _READ_CHUNK], row_filter=_latest_cells()
            )
            read = self._call(
                "ReadRows (holders)",
                lambda left, query=query: list(
                    self._table.read_rows(query, **within(left))
                ),
            )
            for row in read:
                wanted = groups[row.row_key]
                for cell in row.get_cells(ID_REGISTRY_FAMILY):
                    if cell.qualifier in wanted:
                        found[(row.row_key, cell.qualifier)] = cell.value
        return found

    def owners(self, clicks: Iterable[ClickRef]) -> dict[str, str]:
        """The token each registered click is held by; unregistered ones are
        absent."""
        groups = self._group(list(clicks))
        return {
            qualifier.decode(): holder.decode()
            for (_, qualifier), holder in self._holders(groups).items()
        }

    def take_over(self, click: ClickRef, holder: str, token: str) -> bool:
        """Make ``token`` hold ``click``'s registration iff ``holder`` (as
        ``owners`` reports it) holds it now; True if ``token`` holds it after.

        Used by verification to re-join a click that was registered but never
        output: the registration moves in one conditional write, so there is
        no moment when the click is free (another pipeline could win it, and
        a crash would leave it neither registered nor output), and the old
        holder, if it is ever run again, finds the click taken. The row's
        other clicks are untouched.
        """
        qualifier = click.click_id.encode()
        held = rf.RowFilterChain(
            [
                _column(qualifier),
                rf.CellsColumnLimitFilter(1),
                rf.LiteralValueFilter(holder.encode()),
            ]
        )
        stamp = _cell_micros(click, time.time_ns() // 1_000_000)
        moved = self._call(
            "CheckAndMutateRow (take over)",
            lambda left: self._table.check_and_mutate_row(
                row_key(click, self._layout),
                held,
                true_case_mutations=[
                    DeleteRangeFromColumn(ID_REGISTRY_FAMILY, qualifier),
                    SetCell(ID_REGISTRY_FAMILY, qualifier, token.encode(), stamp),
                ],
                operation_timeout=left,
            ),
        )
        # A resent write that had been applied finds the click moved already.
        return moved or self.owners([click]).get(click.click_id) == token


def _cell_micros(click: ClickRef, now_ms: int) -> int:
    """The timestamp of ``click``'s registry cell, in Bigtable's millisecond
    granularity: never before the click's event time, from which the age
    check counts the N days the cell must live."""
    return max(now_ms, click.event_time_ms) * 1000


def _layout_value(layout: RegistryLayout) -> bytes:
    return f"buckets={layout.buckets} slice_ms={layout.slice_ms}".encode()


def _held_outcome(holder: bytes, token: bytes, pipeline: bytes) -> Outcome:
    """What it means for ``token`` that ``holder`` holds the click."""
    if holder == token:
        return Outcome.ALREADY_MINE
    if holder == pipeline or holder.startswith(pipeline + b"#"):
        return Outcome.REPEATED
    return Outcome.DUPLICATE


def _column(qualifier: bytes) -> rf.RowFilter:
    return rf.ColumnRangeFilter(
        ID_REGISTRY_FAMILY,
        qualifier,
        qualifier,
        inclusive_start=True,
        inclusive_end=True,
    )


def _latest_cells() -> rf.RowFilter:
    # A column range rather than a family regex: the emulator compiles a
    # regex filter once per cell it tests.
    return rf.RowFilterChain(
        [rf.ColumnRangeFilter(ID_REGISTRY_FAMILY), rf.CellsColumnLimitFilter(1)]
    )

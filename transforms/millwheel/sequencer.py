"""Sequencer tokens: single-writer fencing of Bigtable rows.

MillWheel guarantees one writer per key range by attaching a sequencer token
to every write: when work moves to a new worker, that worker obtains a new
token, which invalidates the old one, so a "zombie" that still believes it
owns the keys cannot clobber the new owner's state.

Here the fencing unit is one Bigtable row, because ``CheckAndMutateRow`` is
atomic on one row only. Each fenced row carries a token cell
(family ``seq``, column ``token``) holding a generation number:

- ``acquire(row_key)`` increments the generation with a compare-and-set
  (``CheckAndMutateRow`` conditioned on the generation it just read) and
  returns a ``SequencerToken``. The newest acquirer always wins: acquiring
  supersedes any earlier token for the row, whether or not its holder is
  alive.
- ``commit(row_key, token, mutations)`` applies ``mutations`` with a
  ``CheckAndMutateRow`` whose predicate is "the token cell still holds my
  generation". A superseded writer's commit applies nothing and raises
  ``StaleSequencerToken`` (``try_commit`` returns False instead).
- Committing again with the same, still-current token succeeds, so a retried
  commit is safe; it is idempotent if the mutations carry explicit cell
  timestamps (otherwise the retry writes a second version, which a
  latest-only GC rule drops).

To fence a key range, keep its state in one row (row key = the range), or
acquire a token per row before the first write to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.cloud.bigtable.data import DeleteRangeFromColumn, Mutation, SetCell, Table
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_tables import SEQUENCER_FAMILY

TOKEN_COLUMN = b"token"
_GENERATION_BYTES = 8


class StaleSequencerToken(Exception):
    """A commit was refused because a newer token was acquired for the row."""

    def __init__(self, token: SequencerToken) -> None:
        super().__init__(
            f"sequencer token generation {token.generation} for row "
            f"{token.row_key!r} has been superseded; this writer must stop"
        )
        self.token = token


class SequencerContention(RuntimeError):
    """``acquire`` lost the compare-and-set race too many times in a row."""


@dataclass(frozen=True)
class SequencerToken:
    """The right to write one row, valid until someone acquires a newer one."""

    row_key: bytes
    generation: int

    def encoded(self) -> bytes:
        """The token cell's value: the generation, 8 bytes big-endian."""
        return _encode(self.generation)


def _encode(generation: int) -> bytes:
    return generation.to_bytes(_GENERATION_BYTES, "big")


def _as_bytes(row_key: bytes | str) -> bytes:
    return row_key.encode() if isinstance(row_key, str) else row_key


class FencedTable:
    """Rows of a Bigtable table written under sequencer tokens.

    ``table`` is a ``google.cloud.bigtable.data.Table`` whose table has the
    ``seq`` column family (see ``bigtable_tables.models_table``). One instance
    may be shared by the threads of a worker.
    """

    def __init__(
        self,
        table: Table,
        *,
        family: str = SEQUENCER_FAMILY,
        max_attempts: int = 10,
    ) -> None:
        self._table = table
        self._family = family
        self._max_attempts = max_attempts

    def current(self, row_key: bytes | str) -> SequencerToken | None:
        """The row's current token, or None if none was ever acquired."""
        key = _as_bytes(row_key)
        row = self._table.read_row(key, row_filter=self._token_cell())
        if row is None:
            return None
        cells = row.get_cells(self._family, TOKEN_COLUMN)
        if not cells:
            return None
        return SequencerToken(key, int.from_bytes(cells[0].value, "big"))

    def acquire(self, row_key: bytes | str) -> SequencerToken:
        """Take over ``row_key``: a new token that supersedes all earlier ones.

        Raises ``SequencerContention`` if other acquirers keep winning the
        compare-and-set for ``max_attempts`` rounds.
        """
        key = _as_bytes(row_key)
        for _ in range(self._max_attempts):
            held = self.current(key)
            if held is None and self._claim_fresh(key):
                return SequencerToken(key, 1)
            if held is not None and self._supersede(held):
                return SequencerToken(key, held.generation + 1)
        raise SequencerContention(
            f"could not acquire a sequencer token for row {key!r} "
            f"in {self._max_attempts} attempts"
        )

    def try_commit(
        self,
        row_key: bytes | str,
        token: SequencerToken,
        mutations: Sequence[Mutation],
    ) -> bool:
        """Apply ``mutations`` atomically iff ``token`` is still current."""
        key = _as_bytes(row_key)
        if token.row_key != key:
            raise ValueError(f"token is for row {token.row_key!r}, not {key!r}")
        if not mutations:
            raise ValueError("commit needs at least one mutation")
        return self._table.check_and_mutate_row(
            key,
            self._holds(token.generation),
            true_case_mutations=list(mutations),
        )

    def commit(
        self,
        row_key: bytes | str,
        token: SequencerToken,
        mutations: Sequence[Mutation],
    ) -> None:
        """Like ``try_commit``, but raise ``StaleSequencerToken`` when fenced off."""
        if not self.try_commit(row_key, token, mutations):
            raise StaleSequencerToken(token)

    def _claim_fresh(self, key: bytes) -> bool:
        # Predicate "a token cell exists": a False result means it did not,
        # and the false-case mutation wrote generation 1 atomically.
        matched = self._table.check_and_mutate_row(
            key,
            self._token_cell(),
            false_case_mutations=[SetCell(self._family, TOKEN_COLUMN, _encode(1))],
        )
        return not matched

    def _supersede(self, held: SequencerToken) -> bool:
        # Delete before set keeps exactly one version of the token cell,
        # whatever the family's GC rule.
        return self._table.check_and_mutate_row(
            held.row_key,
            self._holds(held.generation),
            true_case_mutations=[
                DeleteRangeFromColumn(self._family, TOKEN_COLUMN),
                SetCell(self._family, TOKEN_COLUMN, _encode(held.generation + 1)),
            ],
        )

    def _token_cell(self) -> rf.RowFilter:
        return rf.RowFilterChain(
            [
                rf.FamilyNameRegexFilter(self._family),
                rf.ColumnQualifierRegexFilter(TOKEN_COLUMN),
                rf.CellsColumnLimitFilter(1),
            ]
        )

    def _holds(self, generation: int) -> rf.RowFilter:
        """Matches iff the newest token cell holds exactly ``generation``."""
        # A range from the value to itself compares raw bytes. Not
        # LiteralValueFilter: Google's client leaves bytes >= 0x80 unescaped
        # in its regex, which the bttest emulator's parser refuses as invalid
        # UTF-8, so every generation with such a byte (128 to 255, ...)
        # failed instead of fencing.
        value = _encode(generation)
        return rf.RowFilterChain(
            [
                self._token_cell(),
                rf.ValueRangeFilter(
                    value, value, inclusive_start=True, inclusive_end=True
                ),
            ]
        )

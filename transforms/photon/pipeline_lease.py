"""A running Photon pipeline's hold on its id, in the id registry's table.

The registry tells pipelines apart by their id alone: two running under one
id each take the other's registrations for their own and output them, so
every click is output twice, and nothing in the registry can tell. The
lease makes the second refuse to start. One row per id, ``~pipeline#<id>``,
holds one cell: who runs the id (``holder``: the host and output directory,
what a restart of the same pipeline shares, and the process) and when it
last said so. A running pipeline renews it every third of ``lease_s``;
another holder may take it only once it is that old, so a pipeline that
crashed frees its id within ``lease_s``, and its own restart (same host and
output, its predecessor's process gone) takes it at once. A second process
on the same output while the first runs is refused like any other. A holder that
stalled past ``lease_s`` while another took the id finds out at its next
renewal: ``held`` sets its ``lost`` event, and the command stops the job.
Until then both output clicks: the lease narrows that window to a renewal
period, it cannot fence a stalled holder's writes (the registry's
conditional writes are per click row, and cannot also check this one).
A holder whose table, or whose cell, is gone stops its job the same way,
with `TableGone`: the table was deleted or emptied under the job, and the
registrations with it.

Every write is a conditional one on the exact value read or last written:
of two pipelines starting together, one takes the lease and the other reads
the winner.

The same row keeps one more cell per output directory the id has written
to (``output:<output id>``, the directory's own id from its record, see
``pipelines.output_pipelines``): its holder and when it last held the id,
written with every renewal and kept after the release. The verifier reads
them (`outputs_written`) to know where an id's joins are, which the
directories' own records cannot say: one of them may be an older output of
the same id, or one written against another registry.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from google.cloud.bigtable.data import DeleteRangeFromColumn, SetCell
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_tables import ID_REGISTRY_FAMILY, id_registry_table
from transforms.photon.bigtable_retry import (
    TableGone,
    call_with_retries,
    check_gone,
    open_table,
    within,
)
from transforms.photon.params import BigtableTarget

_log = logging.getLogger(__name__)
T = TypeVar("T")
# How a call reaches Bigtable: retried until the deadline, or once.
_Call = Callable[[str, Callable[[float], T]], T]

LEASE_SECONDS = 30.0
# Click rows start with four hex digits, the layout row is "~layout".
_ROW_PREFIX = b"~pipeline#"
_COLUMN = b"holder"
_CLEAR = DeleteRangeFromColumn(ID_REGISTRY_FAMILY, _COLUMN)
_OUTPUT_PREFIX = b"output:"
_LONGEST_ATTEMPT_S = 5.0


class PipelineIdInUse(RuntimeError):
    """Another running pipeline holds this pipeline id."""


class Holding(NamedTuple):
    """Who holds a pipeline id (where it writes, and its process there),
    and when they last renewed it."""

    holder: str
    renewed_ms: int
    # None in a cell written before the process was recorded (2026-11-28).
    pid: int | None = None

    def encode(self) -> bytes:
        return f"{self.renewed_ms} {self.pid} {self.holder}".encode()

    @classmethod
    def decode(cls, value: bytes) -> Holding:
        renewed, rest = value.decode().split(" ", 1)
        pid, _, holder = rest.partition(" ")
        if not pid.isdigit():  # the older form: no process, "host:output"
            return cls(rest, int(renewed))
        return cls(holder, int(renewed), int(pid))


class PipelineLease:
    """The lease on ``token`` for ``holder``; see the module's docstring.

    ``acquire`` raises `PipelineIdInUse` while another holder renews it;
    ``held`` acquires, renews in a thread while the block runs, and
    releases after; ``lost_because`` is the error of a lease lost
    meanwhile: ``taken_over``, or `TableGone`.
    """

    def __init__(
        self,
        target: BigtableTarget,
        gc_days: int,
        token: str,
        holder: str,
        *,
        output_id: str | None = None,
        pid: int | None = None,
        lease_s: float = LEASE_SECONDS,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._client, self._table = open_table(
            target, id_registry_table(gc_days, target.registry_table)
        )
        self._table_id = target.registry_table
        self._deadline_s = target.deadline_s
        self._row = _ROW_PREFIX + token.encode()
        self._token, self._holder = token, holder
        self._pid = os.getpid() if pid is None else pid
        self._output_column = (
            None if output_id is None else _OUTPUT_PREFIX + output_id.encode()
        )
        self._lease_ms = int(lease_s * 1000)
        # Renewed three times a lease, each renewal (and the release) one
        # attempt of at most the time to the next, and never long.
        self._renew_every_s = lease_s / 3
        self._attempt_s = min(self._renew_every_s, _LONGEST_ATTEMPT_S)
        self._clock_ms = clock_ms
        self._written: bytes | None = None
        self._lost_because: Exception | None = None

    def close(self) -> None:
        self._client.close()

    def acquire(self) -> None:
        """Takes the id, or raises `PipelineIdInUse` naming its holder.
        Retried on Bigtable's transient errors until its deadline."""
        # A second look only if another pipeline wrote between this one's
        # read and its conditional write.
        for _ in range(2):
            read = self._read(self._call)
            if read is not None:
                self._refuse_if_held(Holding.decode(read))
            if self._write_over(read, self._call):
                return
        raise PipelineIdInUse(
            f"pipeline id {self._token!r} is being taken by other pipelines "
            "starting at the same time: start one pipeline per id"
        )

    def renew(self) -> bool:
        """Renews the lease, one attempt; False if another pipeline has
        taken it. Raises `TableGone` if the table, or the lease's cell, is
        gone: the table was deleted, or emptied under the running job (an
        emulator restarted empty, whose table the job's tasks create anew),
        and the registrations with it."""
        if self._write_over(self._written, self._once):
            return True
        if self._read(self._once) is None:
            # Another pipeline overwrites the cell, never deletes it.
            raise TableGone(
                f"Bigtable table {self._table_id!r} no longer holds pipeline "
                f"id {self._token!r}'s lease: it was emptied under the running "
                "job (an emulator restarted empty, say); its registrations are "
                "lost, so the job stops rather than risk joining a click twice"
            )
        return False

    @property
    def lost_because(self) -> Exception | None:
        """Why `held` set its event: another pipeline took the id
        (`PipelineIdInUse`), or the table lost the lease (`TableGone`)."""
        return self._lost_because

    def release(self) -> None:
        """Frees the id at once for another holder, if this one holds it;
        one attempt (failing, the id is free once the lease runs out)."""
        if self._written is None:
            return
        self._once(
            "CheckAndMutateRow (lease)",
            lambda left: self._table.check_and_mutate_row(
                self._row,
                _value_is(self._written),
                true_case_mutations=[_CLEAR],
                operation_timeout=left,
            ),
        )
        self._written = None

    def taken_over(self) -> PipelineIdInUse:
        """The error of a holder that found, renewing, its id taken."""
        return PipelineIdInUse(
            f"pipeline id {self._token!r} was taken by another pipeline while "
            f"this one had not renewed it for {self._lease_ms / 1000:.0f} s "
            "(stalled, or cut off from Bigtable); this one stopped. Until it "
            "did, both output clicks: check the joined clicks of both outputs "
            "for duplicates, and run one pipeline per id"
        )

    @contextlib.contextmanager
    def held(self) -> Iterator[threading.Event]:
        """Holds the id while the block runs, renewing it in a thread. The
        block gets an event set if another pipeline takes the id meanwhile,
        or the table loses the lease (see `lost_because`).

        Ending the block never waits on Bigtable for more than a renewal's
        time, and a failed release is only a warning: a job that failed
        for Bigtable must end with that error, not another one a deadline
        later.
        """
        self.acquire()
        stop, lost = threading.Event(), threading.Event()
        renewer = threading.Thread(
            target=self._renew_until,
            args=(stop, lost),
            name="pipeline-lease",
            daemon=True,
        )
        renewer.start()
        try:
            yield lost
        finally:
            stop.set()
            renewer.join(timeout=self._attempt_s)
            try:
                self.release()
            except Exception as error:  # noqa: BLE001 - the lease runs out anyway
                _log.warning(
                    "pipeline id %r not released (%s): it is free %.0f s after "
                    "its last renewal",
                    self._token,
                    error,
                    self._lease_ms / 1000,
                )

    def _renew_until(self, stop: threading.Event, lost: threading.Event) -> None:
        while not stop.wait(self._renew_every_s):
            try:
                if self.renew():
                    continue
                error = self.taken_over()
            except TableGone as gone:
                error = gone
            except Exception as failed:  # noqa: BLE001 - retried at the next renewal
                _log.warning("pipeline id %r: renewal failed: %s", self._token, failed)
                continue
            if not stop.is_set():
                _log.error("%s", error)
                self._lost_because = error
                lost.set()
            return

    def _refuse_if_held(self, holding: Holding) -> None:
        age_ms = self._clock_ms() - holding.renewed_ms
        if age_ms >= self._lease_ms or self._restarts(holding):
            return
        if holding.holder == self._holder:
            raise PipelineIdInUse(
                f"pipeline id {self._token!r} is in use by another running "
                f"pipeline writing to the same output ({holding.holder}, "
                f"process {holding.pid}, renewed {age_ms / 1000:.0f} s ago): "
                "both would output every click. Stop it, or wait for it to end"
            )
        raise PipelineIdInUse(
            f"pipeline id {self._token!r} is in use by another running "
            f"pipeline ({holding.holder}, renewed {age_ms / 1000:.0f} s ago): "
            "under one id both would output every click. Stop it, or give this "
            "one another --pipeline_id; an id whose pipeline died is free "
            f"{self._lease_ms / 1000:.0f} s after its last renewal"
        )

    def _restarts(self, holding: Holding) -> bool:
        """Whether this holder may take over ``holding`` before its lease
        runs out: it is this process's own, or that of a process that
        wrote to the same output on this host (the holder names the host)
        and has ended, a crashed run this one restarts. Any other holder of
        the same output, such as a stalled run a supervisor restarted, is
        running: both would register clicks as this pipeline."""
        if holding.holder != self._holder:
            return False
        if holding.pid is None or holding.pid == self._pid:
            return True
        return not _alive(holding.pid)

    def _write_over(self, expected: bytes | None, call: _Call) -> bool:
        """Writes this holder's renewal if the cell still holds ``expected``
        (None: no cell at all); True if it did."""
        mine = Holding(self._holder, self._clock_ms(), self._pid).encode()
        # One version only: the old one goes in the same atomic mutation.
        mutations = [_CLEAR, SetCell(ID_REGISTRY_FAMILY, _COLUMN, mine)]
        if self._output_column is not None:
            mutations += [
                DeleteRangeFromColumn(ID_REGISTRY_FAMILY, self._output_column),
                SetCell(ID_REGISTRY_FAMILY, self._output_column, mine),
            ]
        if expected is None:
            matched = call(
                "CheckAndMutateRow (lease)",
                lambda left: self._table.check_and_mutate_row(
                    self._row,
                    _column(),
                    false_case_mutations=mutations,
                    operation_timeout=left,
                ),
            )
            wrote = not matched
        else:
            wrote = call(
                "CheckAndMutateRow (lease)",
                lambda left: self._table.check_and_mutate_row(
                    self._row,
                    _value_is(expected),
                    true_case_mutations=mutations,
                    operation_timeout=left,
                ),
            )
        if wrote:
            self._written = mine
            return True
        current = self._read(call)
        # A resent write that had been applied finds its own value.
        if current == mine:
            self._written = mine
            return True
        if current is not None and self._is_mine(Holding.decode(current)):
            # Still this holder's: an earlier renewal that timed out here (a
            # Bigtable stalled past the deadline of one attempt) was applied
            # after all, so the cell is not the value last known written.
            # Taken for another pipeline's, it stopped the only one running.
            return self._write_over(current, call)
        return False

    def _is_mine(self, holding: Holding) -> bool:
        return (holding.holder, holding.pid) == (self._holder, self._pid)

    def _read(self, call: _Call) -> bytes | None:
        row = call(
            "ReadRow (lease)",
            lambda left: self._table.read_row(
                self._row,
                row_filter=rf.RowFilterChain([_column(), rf.CellsColumnLimitFilter(1)]),
                **within(left),
            ),
        )
        cells = row.get_cells(ID_REGISTRY_FAMILY, _COLUMN) if row else []
        return cells[0].value if cells else None

    def _call(self, operation: str, call: Callable[[float], T]) -> T:
        return call_with_retries(self._table_id, operation, call, self._deadline_s)

    def _once(self, operation: str, call: Callable[[float], T]) -> T:
        # A renewal's time at most: the next renewal is the retry.
        try:
            return call(self._attempt_s)
        except Exception as error:
            check_gone(self._table_id, operation, error)
            raise


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def outputs_written(
    target: BigtableTarget, gc_days: int, token: str
) -> dict[str, Holding]:
    """The output ids pipeline ``token`` has held its id for, each with its
    holder and when it last renewed the lease for it."""
    client, table = open_table(
        target, id_registry_table(gc_days, target.registry_table)
    )
    try:
        row = call_with_retries(
            target.registry_table,
            "ReadRow (outputs)",
            lambda left: table.read_row(
                _ROW_PREFIX + token.encode(),
                row_filter=rf.RowFilterChain(
                    [
                        rf.ColumnQualifierRegexFilter(
                            re.escape(_OUTPUT_PREFIX) + b".*"
                        ),
                        rf.CellsColumnLimitFilter(1),
                    ]
                ),
                **within(left),
            ),
            target.deadline_s,
        )
    finally:
        client.close()
    cells = [] if row is None else row.get_cells(ID_REGISTRY_FAMILY)
    return {
        cell.qualifier.removeprefix(_OUTPUT_PREFIX).decode(): Holding.decode(cell.value)
        for cell in cells
    }


def _column() -> rf.RowFilter:
    return rf.ColumnRangeFilter(
        ID_REGISTRY_FAMILY, _COLUMN, _COLUMN, inclusive_start=True, inclusive_end=True
    )


def _value_is(value: bytes) -> rf.RowFilter:
    return rf.RowFilterChain(
        [
            _column(),
            rf.CellsColumnLimitFilter(1),
            rf.ValueRangeFilter(value, value, inclusive_start=True, inclusive_end=True),
        ]
    )

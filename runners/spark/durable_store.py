"""Durable keyed state and timers of one key group, in one SQLite file.

A stateful stage's keys hash to a fixed number of key groups; in each
micro-batch a key group belongs to one Spark task, which opens its file,
applies the batch's changes in one transaction and commits it when the task
ends. The driver makes batch N visible to the job by writing ``commits/N``
only after every task has committed, so a task's commit can still have to be
undone: the process may die before ``commits/N``, or Spark may retry the
task. Every change is therefore recorded in an undo log (by SQLite triggers,
so no write path can forget it), and a task that opens the file for batch N
first undoes whatever an earlier attempt of N committed. The undo log of a
batch is dropped when the next batch opens the file: the driver starts batch
N+1 only once N is committed.

Tables:

- ``state``: one row per appended chunk of a user state cell (bag, value,
  combining, set), keyed by the SDK's serialised state key; ordered-list
  state keeps its sort key in ``sort``.
- ``timers``: one row per pending timer, indexed by domain and fire time, so
  a batch reads only the due ones.
- ``holds``: watermark holds that are not timers (a grouping's pending panes).
- ``meta``: the last batch applied and the next timer sequence number.

The file lives on local disk: a million keys are a million rows, not a
million objects in the task's memory. SQLite's page cache is held to
``_PAGE_CACHE_KIB`` per open key group.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners.spark.checkpoint import CheckpointUnusable, unreadable, unwritable

EVENT_DOMAIN = 0
# Seconds a task waits for a key group another attempt holds.
_LOCK_WAIT = 120.0
PROCESSING_DOMAIN = 1
# SQLite caches 2 MiB of pages per connection by default, and a task keeps
# every key group it touched open until it ends: 32 MiB of a worker with 16
# groups. Pages evicted from this smaller cache stay in the OS page cache.
_PAGE_CACHE_KIB = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state(
    id INTEGER PRIMARY KEY, key BLOB NOT NULL, sort INTEGER, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS state_by_key ON state(key, sort, id);
CREATE TABLE IF NOT EXISTS timers(
    ident BLOB PRIMARY KEY, owner BLOB NOT NULL, domain INTEGER NOT NULL,
    fire INTEGER NOT NULL, hold INTEGER NOT NULL, seq INTEGER NOT NULL,
    payload BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS timers_due ON timers(domain, fire, seq);
CREATE TABLE IF NOT EXISTS holds(owner BLOB PRIMARY KEY, hold INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta(
    one INTEGER PRIMARY KEY CHECK (one = 1), batch INTEGER NOT NULL,
    seq INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES (1, -1, 0);
CREATE TABLE IF NOT EXISTS undo(id INTEGER PRIMARY KEY, stmt TEXT NOT NULL);
"""

# Each table's columns; the triggers below record, for every insert, the
# delete that reverses it, and for every delete, the insert that restores it.
_COLUMNS = {
    "state": ("id", "key", "sort", "data"),
    "timers": ("ident", "owner", "domain", "fire", "hold", "seq", "payload"),
    "holds": ("owner", "hold"),
}
_ROW_ID = {"state": "id", "timers": "ident", "holds": "owner"}


def _undo_triggers() -> str:
    statements = []
    for table, columns in _COLUMNS.items():
        row_id = _ROW_ID[table]
        restore = " || ',' || ".join(f"quote(OLD.{c})" for c in columns)
        statements.append(
            f"CREATE TRIGGER IF NOT EXISTS {table}_undo_insert AFTER INSERT ON "
            f"{table} BEGIN INSERT INTO undo(stmt) VALUES ('DELETE FROM {table} "
            f"WHERE {row_id} = ' || quote(NEW.{row_id})); END;"
        )
        statements.append(
            f"CREATE TRIGGER IF NOT EXISTS {table}_undo_delete AFTER DELETE ON "
            f"{table} BEGIN INSERT INTO undo(stmt) VALUES ('INSERT INTO {table}"
            f"({', '.join(columns)}) VALUES (' || {restore} || ')'); END;"
        )
    return "\n".join(statements)


class StateAheadOfCheckpoint(RuntimeError):
    """A key group holds a batch newer than the one being run."""


@dataclass(frozen=True)
class GroupSummary:
    """What the driver needs of a key group between batches.

    ``next_event`` and ``next_processing`` are the earliest pending timers
    (microseconds, None when there is none): the driver wakes the group when
    one is due. ``hold`` is the earliest output timestamp the group may still
    produce, which holds its stage's output watermark.
    """

    stage: str
    group: int
    next_event: int | None
    next_processing: int | None
    hold: int | None


@dataclass(frozen=True)
class StoredTimer:
    """One pending timer as stored: its identity and encoded form."""

    ident: bytes
    owner: bytes
    domain: int
    fire: int
    payload: bytes


# SQLite's names for a write the disk refused: full (SQLITE_FULL), read-only
# (SQLITE_READONLY, e.g. a disk remounted so after errors) or failing
# (SQLITE_IOERR_WRITE, _FSYNC, ...).
_DISK_REFUSED = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR")
# ... for a file damaged in pages that opening it did not read.
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def _disk_refusals_named(method: Callable) -> Callable:
    """Runs a `KeyGroupStore` method, turning a write its disk refused, or a
    damaged page, into `CheckpointUnusable` naming the file.

    The refusal comes from a statement or from the commit (SQLite spills a
    large batch's pages to the write-ahead log before it, even to make room
    for a page a read needs, and writes the rest at it), inside a Spark
    task: as `sqlite3.OperationalError`
    "database or disk is full" it reached the command as a traceback naming
    no file. SQLite has then rolled the whole transaction back, so a later
    statement would commit on its own, outside the batch, where replaying
    the batch cannot undo it: every later call on the store fails the same
    way."""

    @functools.wraps(method)
    def run(self: KeyGroupStore, *args: Any, **kwargs: Any) -> Any:
        if self._refused is not None:
            raise CheckpointUnusable(self._refused)
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as error:
            name = getattr(error, "sqlite_errorname", "")
            if name.startswith(_DISK_REFUSED):
                refusal = unwritable(self._path, error)
            elif name.startswith(_DAMAGED):
                refusal = unreadable(self._path, error)
            else:
                raise
            self._refused = str(refusal)
            raise refusal from None

    return run


def key_group_file(stage_dir: Path, group: int) -> Path:
    """Where key group ``group`` of a stage keeps its state."""
    return stage_dir / f"kg-{group}.sqlite"


class KeyGroupStore:
    """State, timers and holds of one key group of one stage, for one batch.

    ``open`` starts the batch (undoing an uncommitted earlier attempt of it);
    ``commit`` ends it. Between them every change is part of one SQLite
    transaction, so a task that fails leaves the file as it found it. A
    write the disk refuses raises `CheckpointUnusable` naming the file
    (`_disk_refusals_named`).
    """

    def __init__(self, path: Path, batch: int) -> None:
        self._path = path
        self._batch = batch
        # The message of the write the disk refused, once one was.
        self._refused: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A slow earlier attempt of the same task may still hold the
            # file: wait for it rather than fail.
            self._db = sqlite3.connect(path, isolation_level=None, timeout=_LOCK_WAIT)
            self._db.executescript(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                f"PRAGMA cache_size=-{_PAGE_CACHE_KIB};" + _SCHEMA + _undo_triggers()
            )
            self._db.execute("BEGIN IMMEDIATE")
            self._undo_uncommitted(path)
        except (OSError, sqlite3.DatabaseError) as error:
            # Without the file's name, "file is not a database" or "disk I/O
            # error" from deep in a task says nothing the user can act on.
            raise CheckpointUnusable(
                f"checkpoint file {path} cannot be opened ({error}): on a full "
                "or read-only disk, fix it and run again to resume from the "
                "last committed batch; a damaged file, restore it or use a "
                "new --checkpoint_dir"
            ) from None
        (self._seq,) = self._db.execute("SELECT seq FROM meta").fetchone()
        # The first due timer at given horizons, until a timer of this group
        # changes: a task fires one timer at a time and asks every open
        # group for its first each time, but only the group it fired from
        # (or one a callback set a timer in) has a new answer.
        self._first_due: tuple[tuple[int, int], StoredTimer | None] | None = None

    def _undo_uncommitted(self, path: Path) -> None:
        (applied,) = self._db.execute("SELECT batch FROM meta").fetchone()
        if applied > self._batch:
            self._db.execute("ROLLBACK")
            raise StateAheadOfCheckpoint(
                f"key group {path} holds batch {applied} but batch "
                f"{self._batch} is being run: the checkpoint's commit log was "
                "removed or replaced; restore it, or use a new "
                "--checkpoint_dir to start afresh"
            )
        if applied == self._batch:
            # An earlier attempt of this batch committed here, and the driver
            # never committed the batch: take its changes back, newest first.
            statements = [
                stmt
                for (stmt,) in self._db.execute(
                    "SELECT stmt FROM undo ORDER BY id DESC"
                )
            ]
            for stmt in statements:
                self._db.execute(stmt)
        # What is left is the undo log of a committed batch (the driver starts
        # a batch only after the previous one is committed).
        self._db.execute("DELETE FROM undo")

    # -- state -------------------------------------------------------------

    @_disk_refusals_named
    def read(self, key: bytes, start: int | None = None, end: int | None = None):
        """The chunks of one state cell in append (or sort-key) order."""
        if start is None:
            query = "SELECT data FROM state WHERE key = ? ORDER BY sort, id"
            rows = self._db.execute(query, (key,))
        else:
            query = (
                "SELECT data FROM state WHERE key = ? AND sort >= ? AND sort < ? "
                "ORDER BY sort, id"
            )
            rows = self._db.execute(query, (key, start, end))
        return [data for (data,) in rows]

    @_disk_refusals_named
    def append(self, key: bytes, data: bytes, sort: int | None = None) -> None:
        """Appends a chunk to a state cell."""
        self._db.execute(
            "INSERT INTO state(key, sort, data) VALUES (?, ?, ?)", (key, sort, data)
        )

    @_disk_refusals_named
    def clear(self, key: bytes, start: int | None = None, end: int | None = None):
        """Clears a state cell (or an ordered list's sort-key range)."""
        if start is None:
            self._db.execute("DELETE FROM state WHERE key = ?", (key,))
        else:
            self._db.execute(
                "DELETE FROM state WHERE key = ? AND sort >= ? AND sort < ?",
                (key, start, end),
            )

    # -- timers and holds --------------------------------------------------

    @_disk_refusals_named
    def set_timer(
        self,
        ident: bytes,
        owner: bytes,
        domain: int,
        fire: int,
        hold: int,
        payload: bytes,
    ) -> None:
        """Sets (or moves) a timer; ties in fire time keep setting order."""
        self.delete_timer(ident)
        self._first_due = None
        self._seq += 1
        self._db.execute(
            "INSERT INTO timers VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ident, owner, domain, fire, hold, self._seq, payload),
        )

    @_disk_refusals_named
    def delete_timer(self, ident: bytes) -> None:
        """Clears a timer, if it is set."""
        self._db.execute("DELETE FROM timers WHERE ident = ?", (ident,))
        self._first_due = None

    @_disk_refusals_named
    def earliest_due(self, event_horizon: int, processing_horizon: int):
        """The first due timer: event time at or before ``event_horizon``
        first, then processing time at or before ``processing_horizon``."""
        horizons = (event_horizon, processing_horizon)
        if self._first_due is not None and self._first_due[0] == horizons:
            return self._first_due[1]
        found = None
        for domain, horizon in zip(
            (EVENT_DOMAIN, PROCESSING_DOMAIN), horizons, strict=True
        ):
            row = self._db.execute(
                "SELECT ident, owner, domain, fire, payload FROM timers "
                "WHERE domain = ? AND fire <= ? ORDER BY fire, seq LIMIT 1",
                (domain, horizon),
            ).fetchone()
            if row is not None:
                found = StoredTimer(*row)
                break
        self._first_due = (horizons, found)
        return found

    @_disk_refusals_named
    def due_event_timers(self, event_horizon: int) -> list[StoredTimer]:
        """Every event-time timer at or before ``event_horizon``, in fire
        order (ties in setting order)."""
        rows = self._db.execute(
            "SELECT ident, owner, domain, fire, payload FROM timers "
            "WHERE domain = ? AND fire <= ? ORDER BY fire, seq",
            (EVENT_DOMAIN, event_horizon),
        )
        return [StoredTimer(*row) for row in rows.fetchall()]

    @_disk_refusals_named
    def due_owners(self, event_horizon: int, processing_horizon: int) -> Iterator:
        """Owners (keys) with a due timer, each once."""
        rows = self._db.execute(
            "SELECT DISTINCT owner FROM timers WHERE (domain = ? AND fire <= ?) "
            "OR (domain = ? AND fire <= ?)",
            (EVENT_DOMAIN, event_horizon, PROCESSING_DOMAIN, processing_horizon),
        )
        return (owner for (owner,) in rows.fetchall())

    @_disk_refusals_named
    def set_hold(self, owner: bytes, hold: int | None) -> None:
        """Holds the stage's output watermark at ``hold`` for ``owner``."""
        self._db.execute("DELETE FROM holds WHERE owner = ?", (owner,))
        if hold is not None:
            self._db.execute("INSERT INTO holds VALUES (?, ?)", (owner, hold))

    @_disk_refusals_named
    def hold(self, owner: bytes) -> int | None:
        """The hold ``owner`` has set, if any."""
        row = self._db.execute(
            "SELECT hold FROM holds WHERE owner = ?", (owner,)
        ).fetchone()
        return None if row is None else row[0]

    @_disk_refusals_named
    def summary(self, stage: str, group: int) -> GroupSummary:
        """The group's next timers and earliest hold, for the driver."""
        (next_event,) = self._db.execute(
            "SELECT MIN(fire) FROM timers WHERE domain = ?", (EVENT_DOMAIN,)
        ).fetchone()
        (next_processing,) = self._db.execute(
            "SELECT MIN(fire) FROM timers WHERE domain = ?", (PROCESSING_DOMAIN,)
        ).fetchone()
        (timer_hold,) = self._db.execute("SELECT MIN(hold) FROM timers").fetchone()
        (other_hold,) = self._db.execute("SELECT MIN(hold) FROM holds").fetchone()
        holds = [h for h in (timer_hold, other_hold) if h is not None]
        return GroupSummary(
            stage, group, next_event, next_processing, min(holds) if holds else None
        )

    # -- end of the batch ----------------------------------------------------

    @_disk_refusals_named
    def commit(self) -> None:
        """Makes the batch's changes durable (and undoable until the driver
        commits the batch)."""
        self._db.execute("UPDATE meta SET batch = ?, seq = ?", (self._batch, self._seq))
        self._db.execute("COMMIT")
        self._db.close()

    def abandon(self) -> None:
        """Drops the batch's changes (the task failed)."""
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        finally:
            # Closed whatever the rollback did (closing drops a transaction
            # too): left open in the reused Python worker, the connection
            # would keep the file locked.
            self._db.close()

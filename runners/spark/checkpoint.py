"""The checkpoint directory of a streaming job: its offset and commit logs.

Layout under ``--checkpoint_dir``::

    lock                held by the running job (its process id inside)
    job.json            the pipeline's stateful stages, their windowing, the
                        state parameters its transforms declare and the
                        key-group count
    offsets/<N>.json    written before batch N runs: what the batch reads (each
                        source's range), its processing time, its watermarks
    commits/<N>.json    written once batch N's outputs and state are durable:
                        the timer summaries, source positions and metrics after N
    state/<stage>/kg-<G>.sqlite
                        keyed state and timers (``durable_store.py``)
    side_inputs/<N>.pickle
                        side-input elements produced in batch N that no
                        trigger fired, in the windows that have not expired
                        (``side_contents.py``)
    side_firings/<N>.pickle
                        the latest firing of each unexpired window of the
                        side inputs as of batch N (the newest file only is
                        kept)

Batch N's state is visible to the job only once ``commits/N`` exists: on
restart a batch with offsets but no commit is replayed with the same offsets,
so it reads the same input at the same processing time and watermarks. Every
file is written to a temporary name, flushed to disk and renamed, so a crash
leaves either the old file or the new one, never half of one; the next job
to claim the directory deletes the temporary file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

from transforms.records.durable_files import sync_directory, sync_file

_LOGGER = logging.getLogger(__name__)
_BATCH_FILE = re.compile(r"^(\d+)\.(?:json|pickle)$")
# Where a write's temporary file (".<name>.<random>") can be left.
_UNFINISHED_WRITES = (
    (".", ".job.json.*"),
    ("offsets", ".*.json.*"),
    ("commits", ".*.json.*"),
    ("side_inputs", ".*.pickle.*"),
    ("side_firings", ".*.pickle.*"),
)
# Where a batch stores its side inputs, before its commit.
_SIDE_FOLDERS = ("side_inputs", "side_firings")


class CheckpointMismatch(ValueError):
    """The checkpoint directory belongs to another pipeline or layout."""


class CheckpointInUse(RuntimeError):
    """Another running job holds the checkpoint directory."""


class CheckpointUnusable(RuntimeError):
    """A file of the checkpoint directory cannot be read or written."""


def unreadable(path: Path, error: Exception) -> CheckpointUnusable:
    """The error for a checkpoint file that is damaged (truncated, garbled):
    the job cannot tell where it stopped or what state it held, and
    guessing would replay, skip or lose."""
    return CheckpointUnusable(
        f"checkpoint file {path} cannot be read ({error}): restore it, or use "
        "a new --checkpoint_dir to start afresh"
    )


def unwritable(path: Path, error: Exception) -> CheckpointUnusable:
    """The error for a checkpoint file that cannot be written (a full or
    read-only disk, no permission), by the driver (an `OSError`) or by a
    task into a key-group file (an `sqlite3.Error`): the last commit stands,
    so the same command resumes from it once the disk is fixed."""
    return CheckpointUnusable(
        f"checkpoint file {path} cannot be written ({error}): the job resumes "
        "from its last committed batch once this is fixed"
    )


def _write_record(path: Path, record: dict) -> None:
    _write_atomically(path, json.dumps(record, sort_keys=True).encode())


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            sync_file(out)
        os.replace(tmp, path)
        sync_directory(path.parent)
    except OSError as error:
        raise unwritable(path, error) from None


def _read_record(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise unreadable(path, error) from None


def _read_pickle(path: Path) -> Any:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError) as error:
        raise unreadable(path, error) from None


# The layout of what a checkpoint names. 6: followed directories and
# streaming sinks declare the paths their state is kept under; 5: the job
# records the state parameters its transforms declare
# (`transforms.millwheel.state_params`), and a followed directory's
# restriction holds file versions, not paths;
# 4: its keyed stages' windowing; 3: fused stages are named by their sorted
# steps (2 by their transform id, whose order of steps varied between
# processes; 1 with Beam's process-wide counter). A directory of another
# layout is refused: its remainders and state would be looked up under
# names this version does not give, or its windows or parameters not
# checked.
LAYOUT = 6


def _differences(recorded: dict, job: dict) -> list[str]:
    """What differs between two job records, one entry per differing value
    (within a mapping, per key: a changed window size names its transform)."""
    found = []
    for key in sorted(recorded.keys() | job.keys()):
        before, now = recorded.get(key), job.get(key)
        if before == now:
            continue
        if isinstance(before, dict) and isinstance(now, dict):
            found.extend(
                f"{key} of {name}: recorded {before.get(name)}, this run "
                f"{now.get(name)}"
                for name in sorted(before.keys() | now.keys())
                if before.get(name) != now.get(name)
            )
        else:
            found.append(f"{key}: recorded {before}, this run {now}")
    return found


class CheckpointDir:
    """Offset log, commit log and state files of one streaming job."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.root = Path(path)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a read-only disk, no permission
            raise CheckpointUnusable(
                f"checkpoint directory {path} cannot be created ({error})"
            ) from None
        self._lock: int | None = None

    def claim(self) -> None:
        """Holds the directory for this job until `release`, or until its
        process ends, however it ends (the kernel drops the lock).

        Two drivers on one directory would each replay the batch the other
        logged and commit over the other's commits: their state and outputs
        are then those of neither. Raises `CheckpointInUse`, naming the
        holder's process id, if another job holds it.
        """
        try:
            fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise unwritable(self.root / "lock", error) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointInUse(
                f"checkpoint directory {self.root} is in use by another running "
                f"job (process {holder}): stop that job first, or use another "
                "--checkpoint_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock = fd
        self._remove_unfinished_writes()

    def _remove_unfinished_writes(self) -> None:
        """Deletes the temporary files of writes that a killed job never
        renamed into place: never read, but kept for good otherwise. With
        the directory held, no other job can be writing them."""
        for folder, pattern in _UNFINISHED_WRITES:
            for leftover in (self.root / folder).glob(pattern):
                leftover.unlink(missing_ok=True)

    def release(self) -> None:
        """Lets another job use the directory (see `claim`)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def bind(self, job: dict[str, Any]) -> None:
        """Records ``job`` (stateful stages, key groups) on first use; refuses a
        directory written by a different pipeline, whose state would be read
        under the wrong stages or key groups."""
        job = {**job, "layout": LAYOUT}
        path = self.root / "job.json"
        if not path.exists():
            if self._batches("commits"):
                # Written anew, it would vouch for state it never checked.
                raise CheckpointUnusable(
                    f"checkpoint file {path} is missing, and batches were "
                    "committed: restore it, or use a new --checkpoint_dir to "
                    "start afresh"
                )
            _write_record(path, job)
            return
        recorded = _read_record(path)
        if recorded != job:
            raise CheckpointMismatch(
                f"checkpoint directory {self.root} was written by another "
                f"pipeline or with other streaming options or parameters: "
                f"{'; '.join(_differences(recorded, job))}. Run with the "
                "recorded values to resume, or use a new --checkpoint_dir "
                "to start afresh"
            )

    def write_offsets(self, batch: int, record: dict) -> None:
        """Logs what batch ``batch`` will read, before it runs."""
        _write_record(self.root / "offsets" / f"{batch}.json", record)

    def read_offsets(self, batch: int) -> dict | None:
        """The logged offsets of ``batch``, if it was ever started."""
        path = self.root / "offsets" / f"{batch}.json"
        return _read_record(path) if path.exists() else None

    def write_commit(self, batch: int, record: dict) -> None:
        """Marks ``batch`` committed, with the job's position after it."""
        _write_record(self.root / "commits" / f"{batch}.json", record)

    def last_commit(self) -> tuple[int, dict] | None:
        """The newest committed batch and its record, or None."""
        batches = self._batches("commits")
        if not batches:
            return None
        last = batches[-1]
        return last, _read_record(self.root / "commits" / f"{last}.json")

    def write_side_inputs(self, batch: int, produced: dict[str, list[bytes]]) -> None:
        """Stores the side-input elements batch ``batch`` produced that no
        trigger fired (before its commit): later batches read them, across
        restarts too."""
        path = self.root / "side_inputs" / f"{batch}.pickle"
        _write_atomically(path, pickle.dumps(produced))

    def read_side_inputs(self, through: int) -> dict[int, dict[str, list[bytes]]]:
        """Side-input elements of every batch up to ``through`` that stores
        some, by batch."""
        return {
            batch: _read_pickle(self.root / "side_inputs" / f"{batch}.pickle")
            for batch in self._batches("side_inputs")
            if batch <= through
        }

    def shrink_side_inputs(self, batch: int, kept: dict[str, list[bytes]]) -> None:
        """Replaces the side-input elements batch ``batch`` stored with
        ``kept``, those in windows that have not expired (none: the file
        goes). Only after the commit whose watermarks expired the others: a
        restart from an earlier commit would still read them."""
        if kept:
            self.write_side_inputs(batch, kept)
        else:
            (self.root / "side_inputs" / f"{batch}.pickle").unlink(missing_ok=True)

    def write_side_firings(self, batch: int, firings: dict) -> None:
        """Stores the side inputs' latest firings as of batch ``batch``
        (before its commit). They replace those of earlier batches, which
        `prune` deletes once the batch is committed."""
        path = self.root / "side_firings" / f"{batch}.pickle"
        _write_atomically(path, pickle.dumps(firings))

    def read_side_firings(self, through: int) -> dict | None:
        """The side inputs' latest firings as of batch ``through``, or None
        if no batch up to it stored any."""
        stored = [b for b in self._batches("side_firings") if b <= through]
        if not stored:
            return None
        return _read_pickle(self.root / "side_firings" / f"{stored[-1]}.pickle")

    def drop_uncommitted_side_inputs(self, committed: int | None) -> None:
        """Deletes the side-input files of batches after ``committed`` (all
        of them if None): an attempt that crashed before its commit left
        them, and its replay, reading as much or less (a clock-driven
        source), may not write them again, so a later restart would read
        what no committed batch produced."""
        for folder in _SIDE_FOLDERS:
            for batch in self._batches(folder):
                if committed is None or batch > committed:
                    (self.root / folder / f"{batch}.pickle").unlink(missing_ok=True)

    def state_dir(self, stage_key: str) -> Path:
        """Where the key-group files of one stateful stage live."""
        return self.root / "state" / stage_key

    def prune(self, keep_from: int) -> None:
        """Deletes offset and commit records of batches before ``keep_from``,
        and the side inputs' firings older than the newest up to it: a
        restart only ever reads the last commit, the batch after it and the
        firings as of the last commit."""
        for log in ("offsets", "commits"):
            for batch in self._batches(log):
                if batch < keep_from:
                    (self.root / log / f"{batch}.json").unlink(missing_ok=True)
        firings = [b for b in self._batches("side_firings") if b <= keep_from]
        for batch in firings[:-1]:
            (self.root / "side_firings" / f"{batch}.pickle").unlink(missing_ok=True)

    def _batches(self, log: str) -> list[int]:
        """The batches ``log`` (a folder) holds a file of, in order."""
        folder = self.root / log
        if not folder.exists():
            return []
        found = (_BATCH_FILE.match(name) for name in os.listdir(folder))
        return sorted(int(m.group(1)) for m in found if m)

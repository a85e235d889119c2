"""One retry policy for every Bigtable call Photon makes.

Registry writes used to give up after about 1.5 s, the data client's reads
and bulk writes retried for up to 600 s, and ``check_and_mutate_row`` was not
retried at all. Here every call (conditional writes on the raw channel, the
data client's reads, bulk writes and conditional writes, and the admin calls
that create the tables on first use) is retried on
transient errors with exponential backoff until ``BigtableTarget.deadline_s``
has passed since its first attempt, then fails with `BigtableUnavailable`,
whose message names the table and the operation. The data client is built
with the same deadline (`table_timeouts`), so its own retries stop in time.

A table that no longer exists (``NOT_FOUND``) is `TableGone`, at once: it was
deleted, or an emulator restarted empty under the running job, and either
way the registrations it held are lost, so the job must not go on as if it
could still tell a duplicate. Every Photon call is safe to repeat: writes are
conditional or rewrite the same cell version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from google.api_core import exceptions as core

from transforms.millwheel import bigtable_tables as tables
from transforms.millwheel.bigtable_clients import data_client
from transforms.millwheel.bigtable_tables import TableSpec, ensure_table
from transforms.photon.params import BigtableTarget

T = TypeVar("T")

_TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
_TRANSIENT_ERRORS = (
    core.ServiceUnavailable,
    core.DeadlineExceeded,
    core.Aborted,
    core.TooManyRequests,
    core.RetryError,
)
_FIRST_DELAY_S = 0.05
# The least time an attempt is given, however little the deadline leaves.
_LEAST_ATTEMPT_S = 0.1
_MAX_DELAY_S = 2.0


class BigtableUnavailable(RuntimeError):
    """A Bigtable call kept failing until its deadline."""


class TableGone(RuntimeError):
    """A table the job was using no longer exists."""


def attempt_timeout(deadline_s: float) -> float:
    """The bound of one attempt of a call retried until ``deadline_s``."""
    return min(deadline_s, 20.0)


def table_timeouts(deadline_s: float) -> dict[str, float]:
    """Keyword arguments for ``BigtableDataClient.get_table`` that bound every
    operation of the data client, retries included, by ``deadline_s``."""
    attempt = attempt_timeout(deadline_s)
    return {
        "default_operation_timeout": deadline_s,
        "default_attempt_timeout": attempt,
        "default_read_rows_operation_timeout": deadline_s,
        "default_read_rows_attempt_timeout": attempt,
        "default_mutate_rows_operation_timeout": deadline_s,
        "default_mutate_rows_attempt_timeout": attempt,
    }


def within(left_s: float) -> dict[str, float]:
    """Keyword arguments that bound one call of the data client (its own
    retries included) by the ``left_s`` seconds a deadline leaves."""
    return {"operation_timeout": left_s, "attempt_timeout": attempt_timeout(left_s)}


def call_with_retries(
    table: str, operation: str, call: Callable[[float], T], deadline_s: float
) -> T:
    """``call(left_s)``, retried on transient errors until ``deadline_s``
    after the first attempt; raises `BigtableUnavailable` or `TableGone`
    naming ``table`` and ``operation``, and any other error as it is.

    Each attempt is given the seconds the deadline leaves it, and must not
    take longer (`within`): an attempt started near the deadline with a
    timeout of its own ran the job past it (27 s with a deadline of 15).
    """
    started = time.monotonic()
    delay = _FIRST_DELAY_S
    while True:
        try:
            left = deadline_s - (time.monotonic() - started)
            return call(max(left, _LEAST_ATTEMPT_S))
        except Exception as error:
            check_gone(table, operation, error)
            if not is_transient(error):
                raise
            elapsed = time.monotonic() - started
            if elapsed + delay > deadline_s:
                raise BigtableUnavailable(
                    f"Bigtable table {table!r}: {operation} kept failing for "
                    f"{elapsed:.1f} s (deadline {deadline_s:g} s, "
                    f"bigtable.deadline_seconds): {brief(error)}"
                ) from error
        time.sleep(delay)
        delay = min(2 * delay, _MAX_DELAY_S)


def ensure_table_by_deadline(
    deadline_s: float, project: str, instance_id: str, spec: TableSpec
) -> None:
    """``bigtable_tables.ensure_table`` under this policy: each admin call is
    one attempt, and the whole is retried until ``deadline_s``."""
    call_with_retries(
        spec.table_id,
        "create table",
        lambda left: ensure_table(
            project, instance_id, spec, attempt_timeout_s=attempt_timeout(left)
        ),
        deadline_s,
    )


def table_exists(target: BigtableTarget, table_id: str) -> bool:
    """``bigtable_tables.table_exists`` under this policy."""
    return call_with_retries(
        table_id,
        "get table",
        lambda left: tables.table_exists(
            target.project,
            target.instance_id,
            table_id,
            attempt_timeout_s=attempt_timeout(left),
        ),
        target.deadline_s,
    )


def open_table(target: BigtableTarget, spec: TableSpec):
    """Creates ``spec``'s table if need be (`ensure_table_by_deadline`) and
    opens it on a new data client, every call bounded by the target's
    deadline; returns the client (to close) and the table."""
    ensure_table_by_deadline(
        target.deadline_s, target.project, target.instance_id, spec
    )
    client = data_client(target.project)
    table = client.get_table(
        target.instance_id, spec.table_id, **table_timeouts(target.deadline_s)
    )
    return client, table


def check_gone(table: str, operation: str, error: BaseException) -> None:
    """Raises `TableGone` if ``error`` says the table does not exist."""
    if _any_cause(error, _is_not_found):
        raise TableGone(
            f"Bigtable table {table!r} no longer exists ({operation}): it was "
            "deleted, or the emulator restarted empty under the running job; "
            "its registrations are lost, so the job stops rather than risk "
            "joining a click twice"
        ) from error


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) is worth retrying."""
    return _any_cause(error, _is_transient_one)


def brief(error: BaseException) -> str:
    """The first line of ``error``'s message, bounded."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return lines[0][:300]


def _is_transient_one(error: BaseException) -> bool:
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return error.code() in _TRANSIENT_CODES
    return isinstance(error, _TRANSIENT_ERRORS)


def _is_not_found(error: BaseException) -> bool:
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return error.code() == grpc.StatusCode.NOT_FOUND
    return isinstance(error, core.NotFound)


def _any_cause(error: BaseException, test: Callable[[BaseException], bool]) -> bool:
    """``test`` on ``error``, its causes and the members of exception groups
    (the data client reports a bulk write's failures as a group)."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if test(current):
            return True
        pending.extend(getattr(current, "exceptions", ()))
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return False

"""Bigtable clients, for Bigtable or for the emulator that
``BIGTABLE_EMULATOR_HOST`` names.

Google's clients raise a ``RuntimeWarning`` each time one is made against an
emulator. A job makes one per DoFn setup, in every worker process, so a live
run against the emulator printed the same two lines again and again on
stderr. Here the connection is logged once per process and emulator, at INFO,
and the clients are otherwise Google's own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import warnings
from collections.abc import Iterator

from google.cloud.bigtable import Client
from google.cloud.bigtable.data import BigtableDataClient

_log = logging.getLogger(__name__)

#: The start of the warning Google's clients raise against an emulator.
EMULATOR_WARNING = "Connecting to Bigtable emulator"


def data_client(project: str) -> BigtableDataClient:
    """A data-API client of ``project``; close it when done."""
    with emulator_said_once():
        return BigtableDataClient(project=project)


def admin_client(project: str) -> Client:
    """A classic client of ``project`` with admin rights (tables, families).

    Making it does not warn; it makes a data client of its own when its
    first table is named, which does: use its tables inside
    ``emulator_said_once()``.
    """
    return Client(project=project, admin=True)


@contextlib.contextmanager
def emulator_said_once() -> Iterator[None]:
    """Within it, Google's clients made against an emulator do not warn; the
    emulator's address is logged instead, once per process."""
    with warnings.catch_warnings():
        host = os.environ.get("BIGTABLE_EMULATOR_HOST")
        if host:
            _log_emulator(host)
            warnings.filterwarnings("ignore", EMULATOR_WARNING, RuntimeWarning)
        yield


@functools.cache
def _log_emulator(host: str) -> None:
    _log.info("Bigtable clients connect to the emulator at %s", host)

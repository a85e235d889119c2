"""Pytest fixtures for tests that need Bigtable.

Register with ``pytest_plugins = ["testing.fixtures"]`` in a ``conftest.py``.

- ``bigtable_emulator`` (session): one emulator for the whole run, from
  ``testing.bigtable_emulator.BigtableEmulator``; ``BIGTABLE_EMULATOR_HOST``
  points at it while tests run. Without any emulator on the machine the tests
  that need it are skipped with the reason (run ``bash setup.sh``).
- ``bigtable_instance`` (function): a fresh (project, instance) pair on that
  emulator, so tests never see each other's tables, with helpers for the
  admin and data clients. Its tables are deleted afterwards.

Every test that uses either fixture gets the ``bigtable`` marker, so
``pytest -m "not bigtable"`` deselects them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from testing.bigtable_emulator import BigtableEmulator, EmulatorNotFound
from transforms.millwheel.bigtable_clients import (
    EMULATOR_WARNING,
    admin_client,
    data_client,
)

_FIXTURES = {"bigtable_emulator", "bigtable_instance"}


def pytest_configure(config: pytest.Config) -> None:
    # Google's clients warn on every connection to an emulator; that is the
    # point of these fixtures, not news. (The project's own clients, made
    # through `bigtable_clients`, do not warn; tests also use Google's.)
    config.addinivalue_line(
        "filterwarnings", f"ignore:{EMULATOR_WARNING}:RuntimeWarning"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a Bigtable fixture with ``bigtable``."""
    for item in items:
        if _FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.bigtable)


@pytest.fixture(scope="session")
def bigtable_emulator() -> Iterator[BigtableEmulator]:
    """One running Bigtable emulator for the test session."""
    emulator = BigtableEmulator()
    try:
        emulator.start()
    except EmulatorNotFound as exc:
        pytest.skip(str(exc))
    try:
        yield emulator
    finally:
        emulator.stop()


@dataclass
class BigtableTestInstance:
    """A (project, instance) pair of its own on the emulator, for one test."""

    project: str
    instance_id: str
    host: str
    _clients: list = field(default_factory=list)

    def admin_client(self):
        """A classic ``google.cloud.bigtable.Client`` with admin rights."""
        client = admin_client(self.project)
        self._clients.append(client)
        return client

    def instance(self):
        """The classic admin ``Instance`` (tables, column families)."""
        return self.admin_client().instance(self.instance_id)

    def data_client(self):
        """A data-API ``BigtableDataClient``, closed after the test."""
        client = data_client(self.project)
        self._clients.append(client)
        return client

    def table(self, table_id: str):
        """A data-API ``Table`` of this instance."""
        return self.data_client().get_table(self.instance_id, table_id)

    def close(self) -> None:
        for client in self._clients:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        self._clients.clear()


@pytest.fixture
def bigtable_instance(
    bigtable_emulator: BigtableEmulator,
) -> Iterator[BigtableTestInstance]:
    """A fresh, empty (project, instance) on the session's emulator."""
    suffix = uuid.uuid4().hex[:8]
    bt = BigtableTestInstance(
        project=f"test-{suffix}",
        instance_id=f"instance-{suffix}",
        host=bigtable_emulator.host,
    )
    try:
        yield bt
    finally:
        for table in bt.instance().list_tables():
            table.delete()
        bt.close()

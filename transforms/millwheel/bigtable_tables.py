"""The Bigtable tables of long-term state, created on first use.

MillWheel keeps per-key state in Bigtable; here the short-lived state lives in
Beam state and only the long-term state does: the Photon id registry, the
event store, the Zeitgeist models and the anomalies. Each table is described
by a ``TableSpec`` and made to exist by ``ensure_table`` the first time a
process uses it (typically from a ``DoFn.setup``), so a fresh instance or
emulator needs no separate provisioning step.

Garbage collection is Bigtable's own, per column family: the id registry's
family forgets registrations after N days (Photon's GC horizon); the others
keep only the newest version of each cell. Bigtable applies GC lazily, so a
reader must still check ages itself where it matters.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.api_core.exceptions import AlreadyExists, NotFound
from google.cloud.bigtable import column_family
from google.cloud.bigtable.column_family import GarbageCollectionRule
from google.cloud.bigtable_admin_v2 import types as admin_types

from transforms.millwheel.bigtable_clients import admin_client, emulator_said_once

_log = logging.getLogger(__name__)

#: Family holding the sequencer token cell of fenced rows (see ``sequencer``).
SEQUENCER_FAMILY = "seq"
#: Family of the id registry: one cell per registered id.
ID_REGISTRY_FAMILY = "id"
#: Family of the event store: the serialized event.
EVENTS_FAMILY = "event"
#: Family of the model table: the serialized model.
MODELS_FAMILY = "model"
#: Family of the anomaly table: the serialized anomaly.
ANOMALIES_FAMILY = "anomaly"


def _latest_only() -> GarbageCollectionRule:
    return column_family.MaxVersionsGCRule(1)


@dataclass(frozen=True)
class TableSpec:
    """A table id and the column families (with GC rules) it must have."""

    table_id: str
    column_families: Mapping[str, GarbageCollectionRule | None] = field(
        default_factory=dict
    )


def id_registry_table(gc_days: int, table_id: str = "id_registry") -> TableSpec:
    """Photon's id registry: ids are garbage-collected after ``gc_days`` days."""
    if gc_days <= 0:
        raise ValueError(f"gc_days must be positive, got {gc_days}")
    max_age = column_family.MaxAgeGCRule(datetime.timedelta(days=gc_days))
    return TableSpec(table_id, {ID_REGISTRY_FAMILY: max_age})


def events_table(table_id: str = "events") -> TableSpec:
    """Photon's event store: query events keyed by query id."""
    return TableSpec(table_id, {EVENTS_FAMILY: _latest_only()})


def models_table(table_id: str = "models") -> TableSpec:
    """Zeitgeist's models, one fenced row per key (single writer per key)."""
    return TableSpec(
        table_id, {MODELS_FAMILY: _latest_only(), SEQUENCER_FAMILY: _latest_only()}
    )


def anomalies_table(table_id: str = "anomalies") -> TableSpec:
    """Zeitgeist's anomalies, with deterministic row keys (weak productions)."""
    return TableSpec(table_id, {ANOMALIES_FAMILY: _latest_only()})


# Tables this process has already ensured, so that every bundle's setup after
# the first costs no admin RPC.
_ensured: set[tuple[str, str, str, str]] = set()
_ensured_lock = threading.Lock()


def ensure_table(
    project: str,
    instance_id: str,
    spec: TableSpec,
    *,
    attempt_timeout_s: float | None = None,
) -> None:
    """Create ``spec``'s table and any missing column family, once per process.

    Safe to call concurrently from many workers: a table or family created by
    someone else in the meantime counts as success. Existing families keep
    their GC rules (an operator may have tuned them); only missing ones are
    added. Honours ``BIGTABLE_EMULATOR_HOST`` through the client.

    With ``attempt_timeout_s`` each admin call is tried once, bounded by it,
    and a failure is raised as it is, for a caller that retries under its own
    deadline (calling again is safe: every step checks what exists). Without
    it, Google's client retries each call by its own defaults (about 60 s).
    """
    # The endpoint is part of the key: tests start several emulators per process.
    key = (
        os.environ.get("BIGTABLE_EMULATOR_HOST", ""),
        project,
        instance_id,
        spec.table_id,
    )
    with _ensured_lock:
        if key in _ensured:
            return
        with emulator_said_once():
            tables = _TableAdmin(project, instance_id, attempt_timeout_s)
            present = tables.families(spec.table_id)
            if present is None:
                present = tables.create(spec)
            for name, gc_rule in spec.column_families.items():
                if name not in present:
                    tables.add_family(spec.table_id, name, gc_rule)
        _ensured.add(key)


def table_exists(
    project: str,
    instance_id: str,
    table_id: str,
    *,
    attempt_timeout_s: float | None = None,
) -> bool:
    """Whether the table exists: one admin call (bounded by
    ``attempt_timeout_s`` and not retried, if given, as in ``ensure_table``)."""
    admin = _TableAdmin(project, instance_id, attempt_timeout_s)
    return admin.families(table_id) is not None


def family_max_age(
    project: str,
    instance_id: str,
    table_id: str,
    family: str,
    *,
    attempt_timeout_s: float | None = None,
) -> datetime.timedelta | None:
    """The age past which ``family``'s GC rule drops any cell of an existing
    table, or None if age alone never drops one (or the family is absent).
    ``attempt_timeout_s`` as in `ensure_table`."""
    with emulator_said_once():
        tables = _TableAdmin(project, instance_id, attempt_timeout_s)
        families = tables.families(table_id) or {}
    present = families.get(family)
    return None if present is None else _max_age(present.gc_rule)


class _TableAdmin:
    """The table-admin calls ``ensure_table`` makes, on Google's generated
    admin client: unlike the classic ``Table`` methods, its calls take a
    timeout and a retry policy."""

    def __init__(
        self, project: str, instance_id: str, attempt_timeout_s: float | None
    ) -> None:
        self._admin = admin_client(project).table_admin_client
        self._instance = f"projects/{project}/instances/{instance_id}"
        self._call_options = (
            {}
            if attempt_timeout_s is None
            else {"retry": None, "timeout": attempt_timeout_s}
        )

    def families(self, table_id: str) -> Mapping[str, admin_types.ColumnFamily] | None:
        """The table's column families, or None if the table does not exist."""
        try:
            table = self._admin.get_table(
                request={
                    "name": self._table_name(table_id),
                    "view": admin_types.Table.View.SCHEMA_VIEW,
                },
                **self._call_options,
            )
        except NotFound:
            return None
        return dict(table.column_families)

    def create(self, spec: TableSpec) -> Mapping[str, admin_types.ColumnFamily]:
        """Creates the table with the spec's families; the families it has."""
        _log.info("creating Bigtable table %s", self._table_name(spec.table_id))
        families = {
            name: _family_pb(rule) for name, rule in spec.column_families.items()
        }
        try:
            self._admin.create_table(
                request={
                    "parent": self._instance,
                    "table_id": spec.table_id,
                    "table": admin_types.Table(column_families=families),
                },
                **self._call_options,
            )
        except AlreadyExists:
            _log.info("table %s was created concurrently", spec.table_id)
            return self.families(spec.table_id) or {}
        return families

    def add_family(
        self, table_id: str, name: str, gc_rule: GarbageCollectionRule | None
    ) -> None:
        _log.info("adding column family %s to %s", name, table_id)
        change = admin_types.ModifyColumnFamiliesRequest.Modification(
            id=name, create=_family_pb(gc_rule)
        )
        # Another worker may add it between our listing and this call.
        with contextlib.suppress(AlreadyExists):
            self._admin.modify_column_families(
                request={"name": self._table_name(table_id), "modifications": [change]},
                **self._call_options,
            )

    def _table_name(self, table_id: str) -> str:
        return f"{self._instance}/tables/{table_id}"


def _family_pb(rule: GarbageCollectionRule | None) -> admin_types.ColumnFamily:
    if rule is None:
        return admin_types.ColumnFamily()
    return admin_types.ColumnFamily(gc_rule=rule.to_pb())


def _max_age(rule: admin_types.GcRule) -> datetime.timedelta | None:
    kind = admin_types.GcRule.pb(rule).WhichOneof("rule")
    if kind == "max_age":
        return rule.max_age
    if kind == "union":  # any rule may drop a cell
        ages = [age for age in map(_max_age, rule.union.rules) if age is not None]
        return min(ages, default=None)
    if kind == "intersection":  # all must agree
        ages = [_max_age(r) for r in rule.intersection.rules]
        return None if None in ages else max(ages, default=None)
    return None  # no rule, or a version limit: the latest cell stays

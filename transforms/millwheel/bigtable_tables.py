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

from google.api_core.exceptions import AlreadyExists
from google.cloud.bigtable import Client, column_family
from google.cloud.bigtable.column_family import GarbageCollectionRule

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
    client: Client | None = None,
) -> None:
    """Create ``spec``'s table and any missing column family, once per process.

    Safe to call concurrently from many workers: a table or family created by
    someone else in the meantime counts as success. Existing families keep
    their GC rules (an operator may have tuned them); only missing ones are
    added. Honours ``BIGTABLE_EMULATOR_HOST`` through the client.
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
            admin = client or admin_client(project)
            table = admin.instance(instance_id).table(spec.table_id)
            if not table.exists():
                _create_table(table, spec)
            _add_missing_families(table, spec)
        _ensured.add(key)


def _create_table(table, spec: TableSpec) -> None:
    _log.info("creating Bigtable table %s", table.name)
    try:
        table.create(column_families=dict(spec.column_families))
    except AlreadyExists:
        _log.info("table %s was created concurrently", table.name)


def _add_missing_families(table, spec: TableSpec) -> None:
    present = table.list_column_families()
    for name, gc_rule in spec.column_families.items():
        if name in present:
            continue
        _log.info("adding column family %s to %s", name, table.name)
        # Another worker may add it between our listing and this call.
        with contextlib.suppress(AlreadyExists):
            table.column_family(name, gc_rule=gc_rule).create()


def family_max_age(
    project: str, instance_id: str, table_id: str, family: str
) -> datetime.timedelta | None:
    """The age past which ``family``'s GC rule drops any cell of an existing
    table, or None if age alone never drops one (or the family is absent)."""
    with emulator_said_once():
        admin = admin_client(project)
        table = admin.instance(instance_id).table(table_id)
        families = table.list_column_families()
    present = families.get(family)
    return None if present is None else _max_age(present.gc_rule)


def _max_age(rule: GarbageCollectionRule | None) -> datetime.timedelta | None:
    if isinstance(rule, column_family.MaxAgeGCRule):
        return rule.max_age
    if isinstance(rule, column_family.GCRuleUnion):  # any rule may drop a cell
        ages = [age for age in map(_max_age, rule.rules) if age is not None]
        return min(ages, default=None)
    if isinstance(rule, column_family.GCRuleIntersection):  # all must agree
        ages = [_max_age(r) for r in rule.rules]
        return None if None in ages else max(ages, default=None)
    return None  # no rule, or a version limit: the latest cell stays

"""Sequencer-token fencing on the Bigtable emulator, and table creation."""

import datetime
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.cloud.bigtable.data import SetCell

from transforms.millwheel.bigtable_tables import (
    ID_REGISTRY_FAMILY,
    MODELS_FAMILY,
    SEQUENCER_FAMILY,
    ensure_table,
    id_registry_table,
    models_table,
)
from transforms.millwheel.sequencer import (
    FencedTable,
    SequencerToken,
    StaleSequencerToken,
)

pytestmark = pytest.mark.bigtable

ROW = b"query#cats"


@pytest.fixture
def table(bigtable_instance):
    ensure_table(
        bigtable_instance.project, bigtable_instance.instance_id, models_table()
    )
    return bigtable_instance.table("models")


@pytest.fixture
def fenced(table):
    return FencedTable(table)


def _model(value: bytes) -> list[SetCell]:
    # Explicit timestamp: a retried commit rewrites the same cell version.
    return [SetCell(MODELS_FAMILY, b"m", value, timestamp_micros=1_000)]


def _stored_model(table) -> bytes:
    row = table.read_row(ROW)
    return row.get_cells(MODELS_FAMILY, b"m")[0].value


def test_first_acquire_is_generation_one(fenced):
    assert fenced.current(ROW) is None
    assert fenced.acquire(ROW) == SequencerToken(ROW, 1)
    assert fenced.current(ROW) == SequencerToken(ROW, 1)


def test_stale_writer_cannot_overwrite_and_new_holder_can(fenced, table):
    old = fenced.acquire(ROW)
    fenced.commit(ROW, old, _model(b"old-1"))

    new = fenced.acquire(ROW)
    assert new.generation == 2

    assert fenced.try_commit(ROW, old, _model(b"zombie")) is False
    with pytest.raises(StaleSequencerToken, match="generation 1"):
        fenced.commit(ROW, old, _model(b"zombie"))
    assert _stored_model(table) == b"old-1"

    fenced.commit(ROW, new, _model(b"new-1"))
    assert _stored_model(table) == b"new-1"


def test_same_token_retry_succeeds(fenced, table):
    token = fenced.acquire(ROW)
    fenced.commit(ROW, token, _model(b"v"))
    fenced.commit(ROW, token, _model(b"v"))

    row = table.read_row(ROW)
    assert [c.value for c in row.get_cells(MODELS_FAMILY, b"m")] == [b"v"]


def test_token_cell_keeps_one_version(fenced, table):
    for _ in range(3):
        fenced.acquire(ROW)
    row = table.read_row(ROW)
    cells = row.get_cells(SEQUENCER_FAMILY, b"token")
    assert [c.value for c in cells] == [(3).to_bytes(8, "big")]


def test_concurrent_acquirers_get_distinct_generations(fenced):
    with ThreadPoolExecutor(max_workers=4) as pool:
        tokens = list(pool.map(lambda _: fenced.acquire(ROW), range(8)))

    assert sorted(t.generation for t in tokens) == list(range(1, 9))
    winners = [t for t in tokens if fenced.try_commit(ROW, t, _model(b"x"))]
    assert winners == [SequencerToken(ROW, 8)]


def test_token_for_another_row_is_rejected(fenced):
    token = fenced.acquire(ROW)
    with pytest.raises(ValueError, match="not b'other'"):
        fenced.commit(b"other", token, _model(b"v"))


def test_ensure_table_creates_families_with_gc_rules_once(bigtable_instance):
    project, instance_id = bigtable_instance.project, bigtable_instance.instance_id
    ensure_table(project, instance_id, id_registry_table(gc_days=3))
    ensure_table(project, instance_id, id_registry_table(gc_days=3))

    table = bigtable_instance.instance().table("id_registry")
    families = table.list_column_families()
    assert list(families) == [ID_REGISTRY_FAMILY]
    assert families[ID_REGISTRY_FAMILY].gc_rule.max_age == datetime.timedelta(days=3)


def test_ensure_table_adds_a_missing_family(bigtable_instance):
    project, instance_id = bigtable_instance.project, bigtable_instance.instance_id
    bigtable_instance.instance().table("models").create(
        column_families={MODELS_FAMILY: None}
    )

    ensure_table(project, instance_id, models_table())

    families = bigtable_instance.instance().table("models").list_column_families()
    assert sorted(families) == [MODELS_FAMILY, SEQUENCER_FAMILY]

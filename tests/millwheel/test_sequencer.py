"""Sequencer-token fencing on the Bigtable emulator, and table creation."""

import datetime
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.cloud.bigtable.data import SetCell

from testing.bigtable_emulator import ENV_VAR, LOCAL_BUILD, BigtableEmulator
from testing.fixtures import BigtableTestInstance
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


@pytest.fixture(scope="module", params=["session", "bttest"])
def emulator(request, bigtable_emulator):
    """The session's emulator, then the local bttest build: their regex
    parsers differ (bttest's refuses bytes >= 0x80 that gcloud's accepts),
    and fencing must hold on both. One bttest for the module, not per test.

    The session's starts first (an argument here): started while bttest
    runs, it would take bttest's BIGTABLE_EMULATOR_HOST for its own."""
    if request.param == "session":
        yield bigtable_emulator
        return
    if not LOCAL_BUILD.exists():
        pytest.skip("needs .bin/bttest (bash setup.sh)")
    with BigtableEmulator(("bttest",)) as own:
        # Clients find the emulator by ENV_VAR, which starting bttest took:
        # the module's other tests keep the session's; `instance` points it
        # at bttest for each test parametrised onto bttest.
        os.environ[ENV_VAR] = bigtable_emulator.host
        yield own


@pytest.fixture
def instance(request, monkeypatch, emulator, bigtable_emulator):
    """A fresh (project, instance) on ``emulator``."""
    if emulator is bigtable_emulator:
        yield request.getfixturevalue("bigtable_instance")
        return
    monkeypatch.setenv(ENV_VAR, emulator.host)
    suffix = uuid.uuid4().hex[:8]
    own = BigtableTestInstance(f"test-{suffix}", f"instance-{suffix}", emulator.host)
    yield own
    own.close()  # its tables go with the emulator, at the module's end


@pytest.fixture
def table(instance):
    ensure_table(instance.project, instance.instance_id, models_table())
    return instance.table("models")


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


@pytest.mark.parametrize("stored", [127, 255, 0x7FFF])
def test_fencing_holds_where_the_generation_has_a_byte_of_0x80_or_more(
    fenced, table, stored
):
    # The row is seeded as earlier versions wrote it (8 bytes big-endian), so
    # this is also a store written before the fix: read, taken over, fenced.
    table.mutate_row(
        ROW, SetCell(SEQUENCER_FAMILY, b"token", stored.to_bytes(8, "big"))
    )
    assert fenced.current(ROW) == SequencerToken(ROW, stored)

    taker = fenced.acquire(ROW)
    assert taker.generation == stored + 1
    assert fenced.try_commit(ROW, taker, _model(b"taker")) is True
    assert (
        fenced.try_commit(ROW, SequencerToken(ROW, stored), _model(b"zombie")) is False
    )

    assert fenced.acquire(ROW).generation == stored + 2
    assert fenced.try_commit(ROW, taker, _model(b"zombie")) is False
    assert _stored_model(table) == b"taker"


def test_acquiring_again_and_again_passes_generation_256(fenced):
    for _ in range(257):
        token = fenced.acquire(ROW)

    assert token == SequencerToken(ROW, 257)
    assert fenced.try_commit(ROW, token, _model(b"v")) is True
    assert fenced.try_commit(ROW, SequencerToken(ROW, 256), _model(b"z")) is False


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

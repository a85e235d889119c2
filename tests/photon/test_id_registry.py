"""The id registry's conditional inserts, batching, release and GC horizon."""

import pytest

from tests.photon.joining import DAY, target_of
from transforms.millwheel.bigtable_tables import ID_REGISTRY_FAMILY
from transforms.photon import IdRegistry, Outcome, older_than_horizon
from transforms.photon.id_registry import row_key


@pytest.fixture
def registry(bigtable_instance):
    registry = IdRegistry(target_of(bigtable_instance), gc_days=3, max_in_flight=8)
    yield registry
    registry.close()


def test_first_token_wins_and_retries_with_it_are_idempotent(registry):
    assert registry.register("c1", "A") is Outcome.REGISTERED
    assert registry.register("c1", "A") is Outcome.ALREADY_MINE
    assert registry.register("c1", "B") is Outcome.DUPLICATE
    assert registry.owners(["c1", "c2"]) == {"c1": "A"}


def test_batched_registration_answers_each_id_in_order(registry):
    registry.register_many(["b1", "b3"], "B")
    ids = [f"c{i}" for i in range(40)] + ["b1", "b3"]
    outcomes = registry.register_many(ids, "A")
    assert outcomes == [Outcome.REGISTERED] * 40 + [Outcome.DUPLICATE] * 2
    # A retry of the whole batch (a retried bundle) changes nothing.
    again = registry.register_many(ids, "A")
    assert again == [Outcome.ALREADY_MINE] * 40 + [Outcome.DUPLICATE] * 2
    assert set(registry.owners(ids).values()) == {"A", "B"}


def test_release_only_frees_an_id_held_by_the_given_token(registry):
    registry.register("c1", "A")
    assert registry.release("c1", "B") is False
    assert registry.owners(["c1"]) == {"c1": "A"}
    assert registry.release("c1", "A") is True
    assert registry.owners(["c1"]) == {}
    assert registry.register("c1", "B") is Outcome.REGISTERED


def test_rows_are_hash_prefixed_and_the_table_has_the_gc_rule(
    registry, bigtable_instance
):
    keys = [row_key(f"click-{i:05d}") for i in range(100)]
    assert all(key.endswith(f"#click-{i:05d}".encode()) for i, key in enumerate(keys))
    # Sequential ids land all over the key space, not on one tablet.
    assert len({key[:1] for key in keys}) > 8
    table = bigtable_instance.instance().table("id_registry")
    rule = table.list_column_families()[ID_REGISTRY_FAMILY].gc_rule
    assert rule.max_age.days == 3


def test_horizon_rejects_only_clicks_older_than_gc_days():
    now = 100 * DAY
    assert older_than_horizon(now - 3 * DAY, now, gc_days=3) is None
    reason = older_than_horizon(now - 3 * DAY - 1, now, gc_days=3)
    assert "GC horizon of 3 days" in reason

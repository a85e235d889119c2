"""The id registry: batched conditional inserts per row, take-over, GC horizon."""

import datetime
import threading
import time

import pytest

from tests.photon.joining import DAY, MINUTE, T0, target_of
from transforms.millwheel.bigtable_tables import ID_REGISTRY_FAMILY
from transforms.photon import (
    ClickRef,
    IdRegistry,
    Outcome,
    RegistryLayout,
    older_than_horizon,
)
from transforms.photon.id_registry import LAYOUT_ROW, LayoutMismatch, row_key

LAYOUT = RegistryLayout(buckets=4, slice_ms=10 * MINUTE)


def clicks(prefix, n, start=T0):
    """``n`` clicks a second apart: several per registry row."""
    return [ClickRef(f"{prefix}{i}", start + i * 1000) for i in range(n)]


@pytest.fixture
def registry(bigtable_instance):
    registry = IdRegistry(
        target_of(bigtable_instance), gc_days=3, layout=LAYOUT, max_in_flight=8
    )
    yield registry
    registry.close()


def registry_rows(bigtable_instance):
    """The table's click rows (the layout record left out)."""
    table = bigtable_instance.instance().table("id_registry")
    return {row.row_key: row for row in table.read_rows() if row.row_key != LAYOUT_ROW}


def test_a_pipeline_with_another_layout_refuses_the_table(registry, bigtable_instance):
    target = target_of(bigtable_instance)
    same = IdRegistry(target, gc_days=3, layout=LAYOUT)
    same.close()
    other = RegistryLayout(buckets=LAYOUT.buckets * 2, slice_ms=LAYOUT.slice_ms)
    with pytest.raises(LayoutMismatch, match="buckets=4 slice_ms=600000"):
        IdRegistry(target, gc_days=3, layout=other)
    # The refused registry changed nothing: the first layout still works.
    assert registry.register(ClickRef("c", T0), "A") is Outcome.REGISTERED


def test_first_token_wins_and_retries_with_it_are_idempotent(registry):
    c1, c2 = clicks("c", 2)
    assert registry.register(c1, "A") is Outcome.REGISTERED
    assert registry.register(c1, "A") is Outcome.ALREADY_MINE
    assert registry.register(c1, "B") is Outcome.DUPLICATE
    assert registry.owners([c1, c2]) == {"c0": "A"}


def test_a_batch_is_one_row_per_bucket_and_slice_holding_many_ids(
    registry, bigtable_instance
):
    batch = clicks("c", 300)  # five minutes: one slice
    assert registry.register_many(batch, "A") == [Outcome.REGISTERED] * 300
    rows = registry_rows(bigtable_instance)
    assert len(rows) == LAYOUT.buckets
    cells = {
        qualifier.decode(): versions[0].value.decode()
        for row in rows.values()
        for qualifier, versions in row.cells[ID_REGISTRY_FAMILY].items()
    }
    assert cells == {click.click_id: "A" for click in batch}
    # The row is a function of the click alone.
    assert {row_key(click, LAYOUT) for click in batch} == set(rows)


def test_another_occurrence_of_a_click_is_repeated_not_mine(registry):
    first = ClickRef("c", T0, occurrence="r1")
    relogged = ClickRef("c", T0, occurrence="r1-relogged")
    assert registry.register(first, "A") is Outcome.REGISTERED
    assert registry.register(first, "A") is Outcome.ALREADY_MINE  # a retry
    assert registry.register(relogged, "A") is Outcome.REPEATED
    assert registry.register(relogged, "B") is Outcome.DUPLICATE
    assert registry.owners([first]) == {"c": "A#r1"}
    assert not Outcome.REPEATED.owned


def test_two_occurrences_in_one_batch_register_the_first(registry):
    a, b = ClickRef("c", T0, "r1"), ClickRef("c", T0, "r2")
    assert registry.register_many([a, b, a], "A") == [
        Outcome.REGISTERED,
        Outcome.REPEATED,
        Outcome.REGISTERED,
    ]
    assert registry.register_many([b, a], "A") == [
        Outcome.REPEATED,
        Outcome.ALREADY_MINE,
    ]


def test_a_mixed_batch_settles_each_id_by_its_holder(registry):
    mine, theirs, new = clicks("m", 30), clicks("t", 30), clicks("n", 30)
    registry.register_many(mine, "A")
    registry.register_many(theirs, "B")
    # Interleaved, so every row of the batch mixes the three kinds.
    batch = [c for triple in zip(mine, theirs, new, strict=True) for c in triple]
    outcomes = registry.register_many(batch, "A")
    expected = [Outcome.ALREADY_MINE, Outcome.DUPLICATE, Outcome.REGISTERED] * 30
    assert outcomes == expected
    owners = registry.owners(batch)
    assert owners == {
        **{c.click_id: "A" for c in mine + new},
        **{c.click_id: "B" for c in theirs},
    }
    # A retry of the whole batch (a retried bundle) changes nothing.
    again = registry.register_many(batch, "A")
    assert again == [Outcome.ALREADY_MINE, Outcome.DUPLICATE, Outcome.ALREADY_MINE] * 30


def test_concurrent_overlapping_batches_give_each_id_one_owner(bigtable_instance):
    target = target_of(bigtable_instance)
    everything = clicks("c", 600)
    # Each token registers two thirds, overlapping on the middle third, in
    # batches of 50 from opposite ends so that they collide mid-way.
    for_token = {"A": everything[:400], "B": everything[200:][::-1]}
    outcomes: dict[str, dict[str, Outcome]] = {}

    def run(token):
        registry = IdRegistry(target, gc_days=3, layout=LAYOUT, max_in_flight=4)
        try:
            mine = for_token[token]
            got = {}
            for start in range(0, len(mine), 50):
                batch = mine[start : start + 50]
                answers = registry.register_many(batch, token)
                got.update(zip((c.click_id for c in batch), answers, strict=True))
            outcomes[token] = got
        finally:
            registry.close()

    threads = [threading.Thread(target=run, args=(token,)) for token in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    registry = IdRegistry(target, gc_days=3, layout=LAYOUT)
    try:
        owners = registry.owners(everything)
    finally:
        registry.close()
    assert set(owners) == {c.click_id for c in everything}
    for click in everything:
        winners = [
            token
            for token, got in outcomes.items()
            if got.get(click.click_id) is Outcome.REGISTERED
        ]
        # Exactly one token won it, the registry says so, and the other
        # (if it tried) was told it is a duplicate.
        assert winners == [owners[click.click_id]]
        for token, got in outcomes.items():
            if token != winners[0] and click.click_id in got:
                assert got[click.click_id] is Outcome.DUPLICATE


def test_take_over_moves_an_id_only_from_the_given_holder(registry):
    c1, c2 = clicks("c", 2)
    registry.register_many([c1, c2], "A")
    assert registry.take_over(c1, "B", "V") is False
    assert registry.owners([c1]) == {"c0": "A"}
    assert registry.take_over(c1, "A", "V") is True
    # Only that id: its row neighbour stays with A, and A now loses c0.
    assert registry.owners([c1, c2]) == {"c0": "V", "c1": "A"}
    assert registry.register(c1, "A") is Outcome.DUPLICATE
    assert registry.register(c1, "V") is Outcome.ALREADY_MINE
    assert registry.take_over(c1, "V", "V") is True  # a rerun: idempotent


def test_rows_are_hash_prefixed_by_bucket_and_slice_and_have_the_gc_rule(
    registry, bigtable_instance
):
    layout = RegistryLayout(buckets=64, slice_ms=DAY)
    keys = {row_key(ClickRef(f"click-{i:05d}", T0), layout) for i in range(1000)}
    assert len(keys) == 64
    # Rows of one slice land all over the key space, not on one tablet.
    assert len({key[:1] for key in keys}) > 8
    tomorrow = row_key(ClickRef("click-00000", T0 + DAY), layout)
    assert tomorrow not in keys
    table = bigtable_instance.instance().table("id_registry")
    rule = table.list_column_families()[ID_REGISTRY_FAMILY].gc_rule
    assert rule.max_age.days == 3


def test_a_click_dated_ahead_of_the_clock_keeps_its_registration_past_its_time(
    registry, bigtable_instance
):
    # Cells were stamped with the registration's wall-clock time, so a
    # click dated 30 days ahead (a skewed client) lost its registration to
    # GC 3 days after it was registered, while a copy stayed young enough
    # to pass the age check, and register, until 3 days past its date.
    now_ms = time.time_ns() // 1_000_000
    ahead = ClickRef("ahead", now_ms + 30 * DAY)
    past = ClickRef("past", now_ms - DAY)
    registry.register_many([ahead, past], "A")
    moved = ClickRef("moved", now_ms + 10 * DAY)
    registry.register(moved, "A")
    registry.take_over(moved, "A", "V")
    stamps = {
        qualifier.decode(): versions[0].timestamp
        for row in registry_rows(bigtable_instance).values()
        for qualifier, versions in row.cells[ID_REGISTRY_FAMILY].items()
    }
    assert stamps["ahead"] == ms_datetime(ahead.event_time_ms)
    assert stamps["moved"] == ms_datetime(moved.event_time_ms)
    # A click of the past is stamped at its registration, as before.
    registered = stamps["past"] - ms_datetime(now_ms)
    assert datetime.timedelta(0) <= registered < datetime.timedelta(minutes=1)


def ms_datetime(epoch_ms):
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)


def test_horizon_rejects_only_clicks_older_than_gc_days():
    now = 100 * DAY
    assert older_than_horizon(now - 3 * DAY, now, gc_days=3) is None
    reason = older_than_horizon(now - 3 * DAY - 1, now, gc_days=3)
    # It read "3.0 days old, past the id registry's GC horizon of 3 days".
    assert reason == (
        "click is 3 days and 1 ms old, past the id registry's GC horizon of 3 days"
    )
    assert older_than_horizon(now - 10 * DAY, now, gc_days=3).startswith(
        "click is 10.0 days old"
    )


def test_owners_of_clicks_over_more_rows_than_one_read_takes(registry):
    # A click a minute for a day: some 600 rows of the registry, more than
    # one ReadRows asks for (500), as verification asks of a day's clicks.
    batch = [ClickRef(f"c{i}", T0 + i * MINUTE) for i in range(1500)]
    assert len({row_key(click, LAYOUT) for click in batch}) > 500
    assert registry.register_many(batch, "A") == [Outcome.REGISTERED] * 1500
    assert registry.owners(batch) == {click.click_id: "A" for click in batch}
    # And a second registration of them all reads every holder too.
    assert registry.register_many(batch, "A") == [Outcome.ALREADY_MINE] * 1500

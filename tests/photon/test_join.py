"""`PhotonJoin` semantics on the DirectRunner against the Bigtable emulator."""

import apache_beam as beam
import pytest

from tests.photon.joining import (
    DAY,
    MINUTE,
    T0,
    Script,
    click,
    expect,
    join,
    pipeline,
    query,
    target_of,
)
from transforms.photon import (
    DEAD_LETTERS,
    JOINED,
    UNJOINABLE,
    WASTED,
    EventStore,
    JoinParams,
    RegistryParams,
)
from transforms.photon.id_registry import ClickRef, IdRegistry, occurrence_token
from transforms.records.photon_pb2 import ClickEvent, UnjoinableClick

pytestmark = pytest.mark.bigtable

MAX_WAIT = 10 * MINUTE
TTL = 30 * MINUTE
PARAMS = JoinParams(max_wait_ms=MAX_WAIT, query_ttl_ms=TTL)
# Scripted events are dated 2026-01; judge their age by that time.
REGISTRY = RegistryParams(now_ms=T0 + DAY)


def joined_pair(j):
    return j.click.click_id, j.query.query_id, j.joined_at


def unjoinable_with_time(u, ts=beam.DoFn.TimestampParam):
    return u.click.click_id, UnjoinableClick.Reason.Name(u.reason), ts.micros // 1000


def test_click_before_its_query_is_joined_when_the_query_comes(bigtable_instance):
    served, clicked = T0, T0 + MINUTE
    script = (
        Script()
        .add(click("c1", "q1", clicked))
        .advance(clicked + MAX_WAIT // 2)  # waiting, still within max_wait
        .add(query("q1", served))  # logged late
        .advance(clicked + 2 * MAX_WAIT)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(out[JOINED], joined_pair, [("c1", "q1", clicked)], "Joined")
        expect(out[UNJOINABLE], lambda u: u.click.click_id, [], "Unjoinable")


def test_click_without_query_is_unjoinable_at_max_wait(bigtable_instance):
    clicked = T0 + MINUTE
    script = (
        Script()
        .add(click("orphan", "never", clicked), query("q2", T0))
        .advance(clicked + MAX_WAIT - 1)
        .add(click("c2", "q2", clicked + MAX_WAIT - 1))
        .advance(clicked + 3 * MAX_WAIT)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(
            out[UNJOINABLE] | beam.Map(unjoinable_with_time),
            lambda row: row,
            # Emitted at the click's deadline, not before.
            [("orphan", "QUERY_NOT_FOUND", clicked + MAX_WAIT)],
            "Unjoinable",
        )
        expect(out[JOINED], joined_pair, [("c2", "q2", clicked + MAX_WAIT - 1)], "J")


def test_event_store_serves_a_query_gone_from_the_joiner_state(bigtable_instance):
    served = T0
    late_click = served + TTL + 5 * MINUTE  # after the query's state was cleared
    # The store also holds a newer copy of q3 that the stream never carries:
    # a join with that copy can only have come from the store.
    stored = query("q3", served + 1, query_text="stored copy")
    store = EventStore(target_of(bigtable_instance))
    try:
        store.put_many([stored])
    finally:
        store.close()
    script = (
        Script()
        .add(query("q3", served, query_text="streamed copy"))
        .advance(served + TTL + MINUTE)  # the GC timer fires: state is gone
        .add(click("c3", "q3", late_click))
        .advance(late_click + 2 * MAX_WAIT)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(
            out[JOINED],
            lambda j: (j.click.click_id, j.query.query_text),
            [("c3", "stored copy")],
            "Joined",
        )


def test_a_query_in_state_is_not_looked_up(bigtable_instance):
    # Same as above, but the click comes while the query is still cached.
    stored = query("q9", T0 + 1, query_text="stored copy")
    store = EventStore(target_of(bigtable_instance))
    try:
        store.put_many([stored])
    finally:
        store.close()
    script = (
        Script()
        .add(query("q9", T0, query_text="streamed copy"))
        .advance(T0 + TTL // 2)
        .add(click("c9", "q9", T0 + TTL // 2 + 1))
        .advance(T0 + 2 * TTL)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(
            out[JOINED],
            lambda j: (j.click.click_id, j.query.query_text),
            [("c9", "streamed copy")],
            "Joined",
        )


def test_duplicated_clicks_are_output_once(bigtable_instance):
    original = click("c4", "q4", T0 + MINUTE, record_id="r4")
    relogged = click("c4", "q4", T0 + MINUTE, record_id="r4-relogged")
    script = (
        Script()
        .add(original, original)  # before the query: both pending
        .add(query("q4", T0))
        .advance(T0 + 2 * MINUTE)
        .add(relogged)  # after the join
        .advance(T0 + 3 * MAX_WAIT)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(out[JOINED], joined_pair, [("c4", "q4", T0 + MINUTE)], "Joined")
        expect(out[WASTED], joined_pair, [], "Wasted")


def test_a_duplicate_the_joiner_forgot_is_not_output_again(bigtable_instance):
    # The joiner remembers a click id for the query's TTL only. A relogged
    # copy arriving after that (its query id's entry was GC'd) is joined
    # again from the event store, and the registry stops it: the joiner marks
    # it as a click it may have forgotten.
    original = click("c7", "q7", T0 + 1, record_id="r7")
    relogged = click("c7", "q7", T0 + 1, record_id="r7-again")
    script = (
        Script()
        .add(query("q7", T0), original)
        .advance(T0 + 2 * TTL)  # the entry's GC fires: c7 is forgotten
        .add(relogged)
        .advance(T0 + 4 * TTL)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=PARAMS, registry=REGISTRY
        )
        expect(out[JOINED], lambda j: j.click.click_id, ["c7"], "Joined")
        expect(out[WASTED], lambda j: j.click.click_id, [], "Wasted")


def test_a_restart_that_meets_another_copy_first_still_outputs_it(
    bigtable_instance,
):
    # A run registers c8 from one copy and dies before its output commits
    # (its outputs are discarded here). The restarted run, same token, meets
    # the other copy first; it must output c8, or no one ever will.
    target = target_of(bigtable_instance)
    first = click("c8", "q8", T0 + 1, record_id="r8")
    second = click("c8", "q8", T0 + 1, record_id="r8-relogged")
    runs = [("Died", [query("q8", T0), first]), ("Restart", [query("q8", T0), second])]
    for name, events in runs:
        with pipeline() as p:
            out = join(p, events, target, token="A", join=PARAMS, registry=REGISTRY)
            expect(out[JOINED], lambda j: j.click.click_id, ["c8"], name)


def test_a_click_id_logged_with_two_query_ids_is_output_once(bigtable_instance):
    # The joiner remembers click ids per query, so it joins a click id once
    # for each query id it is logged with. Both joins were registered under
    # the pipeline's token, the second as ALREADY_MINE, and both output.
    target = target_of(bigtable_instance)
    queries = [query("q1", T0), query("q2", T0)]
    with pipeline() as p:
        both = [*queries, click("c9", "q1", T0 + 1), click("c9", "q2", T0 + 1)]
        out = join(p, both, target, token="A", join=PARAMS, registry=REGISTRY)
        expect(out[JOINED], lambda j: j.click.click_id, ["c9"], "Joined")
    # A rerun that meets only one of the copies outputs it again if it is
    # the one registered (a retry), and not the other (a repeat).
    registry = IdRegistry(target, REGISTRY.gc_days)
    holder = registry.owners([ClickRef("c9", T0 + 1)])["c9"]
    registry.close()
    won = next(
        q
        for q in ("q1", "q2")
        if holder == occurrence_token("A", ClickRef("c9", T0 + 1, query_id=q))
    )
    for query_id in ("q1", "q2"):
        with pipeline() as p:
            events = [*queries, click("c9", query_id, T0 + 1)]
            out = join(p, events, target, token="A", join=PARAMS, registry=REGISTRY)
            again = ["c9"] if query_id == won else []
            expect(out[JOINED], lambda j: j.click.click_id, again, query_id)


def test_a_second_pipeline_wastes_clicks_the_first_registered(bigtable_instance):
    events = [query("q5", T0), click("c5", "q5", T0 + 1), click("c6", "q5", T0 + 2)]
    target = target_of(bigtable_instance)
    with pipeline() as p:
        out = join(p, events, target, token="A", join=PARAMS, registry=REGISTRY)
        expect(out[JOINED], lambda j: j.click.click_id, ["c5", "c6"], "FirstJoined")
    with pipeline() as p:
        out = join(p, events, target, token="B", join=PARAMS, registry=REGISTRY)
        expect(out[JOINED], lambda j: j.click.click_id, [], "SecondJoined")
        expect(out[WASTED], lambda j: j.click.click_id, ["c5", "c6"], "Wasted")
    with pipeline() as p:  # A again: a replay of A is an idempotent retry
        out = join(p, events, target, token="A", join=PARAMS, registry=REGISTRY)
        expect(out[JOINED], lambda j: j.click.click_id, ["c5", "c6"], "Replay")


def test_click_older_than_the_gc_horizon_is_rejected(bigtable_instance):
    now = T0 + 10 * DAY
    registry = RegistryParams(gc_days=3, now_ms=now)
    old, recent = T0, now - 2 * DAY
    events = [
        query("q-old", old),
        click("c-old", "q-old", old + 1),
        query("q-new", recent),
        click("c-new", "q-new", recent + 1),
    ]
    with pipeline() as p:
        target = target_of(bigtable_instance)
        out = join(p, events, target, join=PARAMS, registry=registry)
        expect(out[JOINED], lambda j: j.click.click_id, ["c-new"], "Joined")
        expect(
            out[UNJOINABLE],
            lambda u: (
                u.click.click_id,
                UnjoinableClick.Reason.Name(u.reason),
                "GC horizon of 3 days" in u.detail,
            ),
            [("c-old", "OLDER_THAN_GC_HORIZON", True)],
            "Unjoinable",
        )


def test_a_retry_past_the_gc_horizon_outputs_the_click_it_registered(
    bigtable_instance,
):
    # An attempt registered c-edge while it was young and failed before its
    # output committed; the retry ran once the click had crossed the
    # horizon, rejected it as too old without asking the registry, and the
    # click, registered and never output, was lost (the verifier too sets
    # such clicks aside).
    target = target_of(bigtable_instance)
    young = RegistryParams(gc_days=3, now_ms=T0 + 2 * DAY)
    events = [
        query("q-edge", T0),
        click("c-edge", "q-edge", T0 + 1),
        query("q-old", T0),
        click("c-old", "q-old", T0 + 2),
    ]
    with pipeline() as p:
        join(p, events[:2], target, token="A", join=PARAMS, registry=young)
    retry = RegistryParams(gc_days=3, now_ms=T0 + 4 * DAY)
    with pipeline() as p:
        out = join(p, events, target, token="A", join=PARAMS, registry=retry)
        expect(out[JOINED], lambda j: j.click.click_id, ["c-edge"], "Joined")
        expect(
            out[UNJOINABLE],
            lambda u: (u.click.click_id, UnjoinableClick.Reason.Name(u.reason)),
            [("c-old", "OLDER_THAN_GC_HORIZON")],
            "Unjoinable",
        )
    # Another pipeline does not output it: the registry has it as A's.
    with pipeline() as p:
        out = join(p, events[:2], target, token="B", join=PARAMS, registry=retry)
        expect(out[JOINED], lambda j: j.click.click_id, [], "Other")


def test_unusable_events_go_to_dead_letters(bigtable_instance):
    events = [
        query("q7", T0),
        click("c7", "q7", T0 + 1),
        click("", "q7", T0 + 2),  # no click id
        ClickEvent(click_id="c8", query_id="q7"),  # no event time
        query(" ", T0),  # blank query id
    ]
    with pipeline() as p:
        target = target_of(bigtable_instance)
        out = join(p, events, target, join=PARAMS, registry=REGISTRY)
        expect(out[JOINED], lambda j: j.click.click_id, ["c7"], "Joined")
        expect(
            out[DEAD_LETTERS],
            lambda d: (d.record_type, d.reason),
            [
                ("ClickEvent", "missing field 'click_id'"),
                ("ClickEvent", "missing field 'event_time'"),
                ("QueryEvent", "missing field 'query_id'"),
            ],
            "Dead",
        )


def test_query_ids_sharing_a_shard_keep_their_own_state_and_ttl(bigtable_instance):
    # One shard for everything: q1's state expires while q2's, in the same
    # shard, is still live.
    one_shard = JoinParams(max_wait_ms=MAX_WAIT, query_ttl_ms=TTL, shards=1)
    store = EventStore(target_of(bigtable_instance))
    try:
        store.put_many([query("q1", T0 + 1, query_text="stored copy")])
    finally:
        store.close()
    after_q1_ttl = T0 + TTL + MINUTE
    script = (
        Script()
        .add(
            query("q1", T0, query_text="streamed copy"),
            query("q2", T0 + 25 * MINUTE, query_text="streamed copy"),
        )
        .advance(after_q1_ttl)  # q1's entry is collected, q2's is not
        .add(click("c1", "q1", after_q1_ttl), click("c2", "q2", after_q1_ttl))
        .advance(after_q1_ttl + 2 * MAX_WAIT)
    )
    with pipeline(streaming=True) as p:
        out = join(
            p, script, target_of(bigtable_instance), join=one_shard, registry=REGISTRY
        )
        expect(
            out[JOINED],
            lambda j: (j.click.click_id, j.query.query_id, j.query.query_text),
            [("c1", "q1", "stored copy"), ("c2", "q2", "streamed copy")],
            "Joined",
        )

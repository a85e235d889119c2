"""Parameters of the Photon join: where its Bigtable state lives, how it waits.

Frozen dataclasses, so they pickle with the DoFns that carry them and can be
used as defaults. Times are milliseconds, as in the records.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from transforms.millwheel.typed_params import check_field_types
from transforms.records.parse import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS

DAY_MS = 24 * 3600 * 1000
# Bigtable's table ids.
_TABLE_ID = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}")


@dataclass(frozen=True)
class BigtableTarget:
    """The Bigtable instance holding the id registry and the event store.

    Clients are created from it in each worker's ``DoFn.setup``; the target
    itself is what gets pickled. ``BIGTABLE_EMULATOR_HOST`` in the worker's
    environment redirects every client to an emulator. ``deadline_s`` bounds
    each call, retries included (``bigtable_retry``): past it the job fails
    with an error naming the table and the operation.
    """

    project: str
    instance_id: str
    registry_table: str = "id_registry"
    events_table: str = "events"
    deadline_s: float = 60.0

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {self.deadline_s}")
        if not self.project.strip() or not self.instance_id.strip():
            raise ValueError(
                f"project and instance_id must be named, got {self.project!r} "
                f"and {self.instance_id!r}"
            )
        for table in (self.registry_table, self.events_table):
            if not _TABLE_ID.fullmatch(table):
                raise ValueError(
                    f"{table!r} is not a Bigtable table id (1 to 50 letters, "
                    "digits, '_', '-' or '.', not starting with '-' or '.')"
                )
        if self.registry_table == self.events_table:
            # Each table's column families are its own kind of row.
            raise ValueError(
                "registry_table and events_table must differ, both are "
                f"{self.registry_table!r}"
            )


@dataclass(frozen=True)
class JoinParams:
    """How long the joiner waits for a query, and how long it remembers one.

    ``max_wait_ms``: a click whose query has not arrived by
    ``click_time + max_wait_ms`` of event time (the watermark) is looked up
    in the event store, and is unjoinable if not found there either.
    ``query_ttl_ms``: a query id's state (its query and the ids of its
    clicks) is kept until the watermark passes ``query_ttl_ms`` after the
    latest event time seen for it. It must be at least ``max_wait_ms``, so
    that no click is still waiting when its state is cleared.
    ``shards``: the joiner's keys; query ids are hashed onto them, and the
    runner's per-key costs are paid per shard rather than per query id.
    ``timer_slot_ms``: deadlines and GC times are rounded up to a multiple
    of it, so a shard needs one timer per slot, not one per click.
    """

    max_wait_ms: int = 10 * 60 * 1000
    query_ttl_ms: int = 60 * 60 * 1000
    shards: int = 512
    timer_slot_ms: int = 60 * 1000

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be positive, got {self.max_wait_ms}")
        if self.query_ttl_ms < self.max_wait_ms:
            raise ValueError(
                f"query_ttl_ms ({self.query_ttl_ms}) must be at least "
                f"max_wait_ms ({self.max_wait_ms})"
            )
        if self.shards < 1 or self.timer_slot_ms < 1:
            raise ValueError("shards and timer_slot_ms must be positive")
        if self.timer_slot_ms > self.max_wait_ms:
            # Deadlines are rounded up to a slot: a longer slot would make a
            # click wait for its query longer than max_wait_ms says.
            raise ValueError(
                f"timer_slot_ms ({self.timer_slot_ms}) must be at most "
                f"max_wait_ms ({self.max_wait_ms})"
            )


@dataclass(frozen=True)
class RegistryLayout:
    """How click ids are laid out in the id registry's rows.

    A registry row holds the ids of one hash ``bucket`` of the click id and
    one ``slice_ms`` slice of the click's event time; its column qualifiers
    are the click ids. A batch of registrations then needs one conditional
    write per row it touches, not per id. More buckets spread the load over
    more rows (and tablets); fewer put more ids of a batch into each write.
    Time slices keep rows bounded: a row stops growing once its slice is past,
    and Bigtable's GC empties it ``gc_days`` later.

    Every pipeline sharing a registry must use the same layout: a click must
    map to the same row everywhere, or two pipelines could both win it.
    """

    buckets: int = 8
    slice_ms: int = 60 * 1000

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.buckets < 1 or self.slice_ms < 1:
            raise ValueError(
                f"buckets and slice_ms must be positive, got {self.buckets} "
                f"and {self.slice_ms}"
            )


@dataclass(frozen=True)
class RegistryParams:
    """The id registry's GC horizon and how registrations are batched.

    ``gc_days``: registrations are forgotten (by Bigtable's GC) that many
    days after they were made, so clicks older than that are rejected.
    ``now_ms``: the clock the age check uses; None is the wall clock. Pin it
    to replay old logs reproducibly; the registry's own cells always carry
    the real time, so Bigtable's GC is unaffected.
    ``max_batch``: registrations buffered per bundle before a flush.
    ``max_in_flight``: concurrent CheckAndMutateRow requests (one per
    registry row of the batch) per flush.
    ``layout``: the registry's row layout, shared by every pipeline.
    ``fail_after_register_fraction``: TEST ONLY. That fraction of clicks
    (chosen by a hash of the click id) is dropped after its registration
    commits and before it is output, as if the worker died in between; the
    drops are counted in ``lost_after_register``. ``photon_verify`` restores
    them. Must be 0 in production.
    """

    gc_days: int = 3
    now_ms: int | None = None
    max_batch: int = 500
    max_in_flight: int = 128
    layout: RegistryLayout = RegistryLayout()
    fail_after_register_fraction: float = 0.0

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.gc_days <= 0:
            raise ValueError(f"gc_days must be positive, got {self.gc_days}")
        if self.now_ms is not None and not (
            MIN_EVENT_TIME_MS <= self.now_ms <= MAX_EVENT_TIME_MS
        ):
            # A clock in seconds would make every click look decades young
            # and switch the GC-horizon check off.
            raise ValueError(
                "now_ms is milliseconds since the epoch, between 2000 and 2100, "
                f"got {self.now_ms}"
            )
        if self.max_batch < 1 or self.max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be positive")
        if not 0.0 <= self.fail_after_register_fraction <= 1.0:
            raise ValueError("fail_after_register_fraction must be within [0, 1]")

    @property
    def horizon_ms(self) -> int:
        return self.gc_days * DAY_MS

    def age_clock_ms(self) -> int:
        """The time clicks' ages are judged at: `now_ms`, or the wall clock."""
        return time.time_ns() // 1_000_000 if self.now_ms is None else self.now_ms

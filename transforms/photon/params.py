"""Parameters of the Photon join: where its Bigtable state lives, how it waits.

Frozen dataclasses, so they pickle with the DoFns that carry them and can be
used as defaults. Times are milliseconds, as in the records.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class BigtableTarget:
    """The Bigtable instance holding the id registry and the event store.

    Clients are created from it in each worker's ``DoFn.setup``; the target
    itself is what gets pickled. ``BIGTABLE_EMULATOR_HOST`` in the worker's
    environment redirects every client to an emulator.
    """

    project: str
    instance_id: str
    registry_table: str = "id_registry"
    events_table: str = "events"


@dataclass(frozen=True)
class JoinParams:
    """How long the joiner waits for a query, and how long it remembers one.

    ``max_wait_ms``: a click whose query has not arrived by
    ``click_time + max_wait_ms`` of event time (the watermark) is looked up
    in the event store, and is unjoinable if not found there either.
    ``query_ttl_ms``: a key's state (its query and the ids of its clicks) is
    kept until the watermark passes ``query_ttl_ms`` after the latest event
    time seen for the key. It must be at least ``max_wait_ms``, so that no
    click is still waiting when its key's state is cleared.
    """

    max_wait_ms: int = 10 * 60 * 1000
    query_ttl_ms: int = 60 * 60 * 1000

    def __post_init__(self) -> None:
        if self.max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be positive, got {self.max_wait_ms}")
        if self.query_ttl_ms < self.max_wait_ms:
            raise ValueError(
                f"query_ttl_ms ({self.query_ttl_ms}) must be at least "
                f"max_wait_ms ({self.max_wait_ms})"
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
    ``max_in_flight``: concurrent CheckAndMutateRow requests per flush.
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
    fail_after_register_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.gc_days <= 0:
            raise ValueError(f"gc_days must be positive, got {self.gc_days}")
        if self.max_batch < 1 or self.max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be positive")
        if not 0.0 <= self.fail_after_register_fraction <= 1.0:
            raise ValueError("fail_after_register_fraction must be within [0, 1]")

    @property
    def horizon_ms(self) -> int:
        return self.gc_days * DAY_MS

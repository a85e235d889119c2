"""The id registry's GC horizon, and what must agree with it.

Bigtable forgets a registration ``gc_days`` after it was made (the table's
GC rule, ``bigtable_tables.id_registry_table``). A click older than that may
have been registered and forgotten, so it must not be registered again
(``older_than_horizon``); and an existing table whose GC rule forgets sooner
than ``gc_days`` would let such a click through, so it is refused
(``check_gc_horizon``).
"""

from __future__ import annotations

import datetime

from transforms.millwheel.bigtable_tables import ID_REGISTRY_FAMILY, family_max_age
from transforms.photon.bigtable_retry import attempt_timeout, call_with_retries
from transforms.photon.params import DAY_MS, BigtableTarget


def older_than_horizon(event_time_ms: int, now_ms: int, gc_days: int) -> str | None:
    """Why a click at ``event_time_ms`` may not be registered at ``now_ms``,
    or None if it may."""
    age_ms = now_ms - event_time_ms
    over_ms = age_ms - gc_days * DAY_MS
    if over_ms <= 0:
        return None
    # Within a twentieth of a day, one decimal would read as the horizon.
    age = (
        f"{age_ms / DAY_MS:.1f} days"
        if over_ms >= DAY_MS // 20
        else f"{gc_days} days and {over_ms:,} ms"
    )
    return f"click is {age} old, past the id registry's GC horizon of {gc_days} days"


class GcHorizonTooShort(ValueError):
    """The registry table forgets registrations sooner than ``gc_days``."""


def check_gc_horizon(target: BigtableTarget, gc_days: int) -> None:
    """Raises `GcHorizonTooShort` if the existing registry table's GC rule
    drops cells younger than ``gc_days``: the age check would then let a
    click through whose earlier registration is already gone."""
    max_age = call_with_retries(
        target.registry_table,
        "read GC rule",
        lambda left: family_max_age(
            target.project,
            target.instance_id,
            target.registry_table,
            ID_REGISTRY_FAMILY,
            attempt_timeout_s=attempt_timeout(left),
        ),
        target.deadline_s,
    )
    if max_age is not None and max_age < datetime.timedelta(days=gc_days):
        raise GcHorizonTooShort(
            f"id registry table {target.registry_table!r} garbage-collects "
            f"registrations after {max_age}, less than gc_days={gc_days}: a click "
            f"between the two ages could be joined twice; use gc_days <= "
            f"{max_age.days}, or change the table's GC rule"
        )

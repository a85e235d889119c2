"""Verification: find clicks the registry holds but no output has, and free them.

A pipeline that dies between committing a click's registration and writing
the joined click leaves the click registered (so every other attempt is
refused as a duplicate) yet absent from every output: lost. Photon's
verification compares the click log, the joined output and the registry,
releases the registrations of such clicks, and joins them again.

This module does the comparison and the release; re-joining is the
``PhotonJoin`` of the released clicks under a fresh token, wired by
``pipelines.photon_verify``. Run it on finished outputs only: a click that a
running pipeline has registered but not yet written looks lost too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from transforms.photon.id_registry import ClickRef, IdRegistry


@dataclass
class Findings:
    """What verification found, by click id."""

    logged: int = 0
    output: int = 0
    registered: int = 0
    # click -> token that holds it, for clicks registered but not output.
    lost: dict[ClickRef, str] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)


def find_lost(
    logged: Iterable[ClickRef], output_ids: Iterable[str], registry: IdRegistry
) -> Findings:
    """Clicks of the log that are registered but absent from every output.

    Clicks are looked up by id and event time, which choose the registry row.
    """
    by_id = {click.click_id: click for click in logged}
    output = set(output_ids)
    owners = registry.owners(by_id.values())
    lost = {
        by_id[click_id]: token
        for click_id, token in sorted(owners.items())
        if click_id not in output
    }
    return Findings(
        logged=len(by_id),
        output=len(output & by_id.keys()),
        registered=len(owners),
        lost=lost,
    )


def release_lost(findings: Findings, registry: IdRegistry) -> list[str]:
    """Release each lost click's registration if its token still holds it.

    Returns (and records in ``findings.released``) the released ids; a click
    re-registered by someone else meanwhile is left alone.
    """
    findings.released = [
        click.click_id
        for click, token in findings.lost.items()
        if registry.release(click, token)
    ]
    return findings.released

"""Verification: find clicks the registry holds but no output has, and re-join them.

A pipeline that dies between committing a click's registration and writing
the joined click leaves the click registered (so every other attempt is
refused as a duplicate) yet absent from every output: lost. Photon's
verification compares the click log, the joined outputs and the registry,
and joins such clicks again.

This module does the comparison and moves the lost clicks' registrations to
the verifier (``take_over_lost``); re-joining is the ``PhotonJoin`` of those
clicks under the verifier's token, wired by ``pipelines.photon_verify``.

Crash safety and idempotency come from the verifier's token, which names
the directory it writes to (``verifier_token``): a lost click is never
unregistered, only handed from its holder to the verifier in one
conditional write, so a verifier killed at any point leaves each click
either with its old holder or with the verifier, and a later run finds it
again (registered, not in any output) and finishes the job. A click held by
a verifier whose directory has it joined is not lost, so a second run,
whatever its own directory, joins nothing twice. Run it on finished outputs
only: a click that a running pipeline has registered but not yet written
looks lost too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from transforms.photon.id_registry import ClickRef, IdRegistry, occurrence_token
from transforms.photon.registry_gc import older_than_horizon

# Between a verifier's name and the directory it writes its joins to.
_INTO = "|verified-into:"


def verifier_token(name: str, output: str) -> str:
    """The registry token of a verifier called ``name`` writing to ``output``."""
    return f"{name}{_INTO}{output}"


def verified_into(token: str) -> str | None:
    """The output directory named by a verifier's token; None for others."""
    _, sep, output = token.partition(_INTO)
    return output if sep else None


@dataclass
class Findings:
    """What verification found, by click id."""

    logged: int = 0
    output: int = 0
    registered: int = 0
    # click -> token that holds it, for clicks registered but not output.
    lost: dict[ClickRef, str] = field(default_factory=dict)
    # The same, for those past the registry's GC horizon (`set_aside_too_old`).
    too_old: dict[ClickRef, str] = field(default_factory=dict)
    taken_over: list[str] = field(default_factory=list)


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


def set_aside_too_old(findings: Findings, now_ms: int, gc_days: int) -> None:
    """Moves the lost clicks older than the GC horizon at ``now_ms`` from
    ``findings.lost`` to ``findings.too_old``.

    The re-join would refuse them (``unjoinable``, older than the horizon),
    so taking them over would only move them to the verifier, joined
    nowhere, and report success; they stay with their holders, for a
    verification whose age clock is nearer their time.
    """
    for click in list(findings.lost):
        if older_than_horizon(click.event_time_ms, now_ms, gc_days) is not None:
            findings.too_old[click] = findings.lost.pop(click)


def take_over_lost(findings: Findings, registry: IdRegistry, token: str) -> list[str]:
    """Move each lost click's registration from its holder to ``token``.

    Returns (and records in ``findings.taken_over``) the ids ``token`` holds
    afterwards; a click that someone else took meanwhile is left alone.
    """
    findings.taken_over = [
        click.click_id
        for click, holder in findings.lost.items()
        # Under the token the re-join will register the click with.
        if registry.take_over(click, holder, occurrence_token(token, click))
    ]
    return findings.taken_over

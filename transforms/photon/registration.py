"""Registering join candidates in the id registry, batched per bundle.

``RegisterJoins`` sits between the joiner and the output. It is not keyed and
keeps no Beam state: candidates are buffered in the DoFn and registered
``max_batch`` at a time, the rest at the end of the bundle, with one
conditional write per registry row the batch touches, all in flight together
(``IdRegistry.register_many``).
Since a bundle's outputs are committed only after ``finish_bundle``, no
candidate is output before its registration has committed.

For each candidate ``JoinedClick``:

- older than the registry's GC horizon (by ``RegistryParams.now_ms`` or the
  wall clock): ``unjoinable`` with reason ``OLDER_THAN_GC_HORIZON``, never
  registered (the registry may have forgotten an earlier join of it), unless
  the registry still holds it under this occurrence's token: a retry of a
  bundle that registered it while it was young, output as ``joined`` (or
  the click, registered and never output, would be lost);
- registered now, or already under this occurrence's token (a retried
  bundle): output as ``joined``;
- registered for another occurrence of the click by this pipeline (a copy
  that came after the joiner forgot the click id): dropped, and counted with
  the joiner's ``duplicate_clicks``;
- registered by another pipeline: output as ``wasted``, and counted.

Outputs keep the candidate's timestamp and window. The token is the
pipeline's identity: every copy of the pipeline must use its own, and a
restarted pipeline that replays its input must reuse its old one. Each click
is registered under the token and the candidate's ``occurrence``
(``occurrence_token``), which the joiner sets only for a click it may have
forgotten: any copy of a click, in any attempt, is registered alike until
then (see ``joiner``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms.photon.event_store import METRICS_NAMESPACE
from transforms.photon.id_registry import (
    ClickRef,
    IdRegistry,
    Outcome,
    occurrence_token,
)
from transforms.photon.joiner import UNJOINABLE
from transforms.photon.params import BigtableTarget, RegistryParams
from transforms.photon.registry_gc import older_than_horizon
from transforms.records.photon_pb2 import JoinedClick, UnjoinableClick

WASTED = "wasted"


def lost_after_register(click_id: str, fraction: float) -> bool:
    """TEST ONLY: whether fault injection drops ``click_id`` after registering.

    A hash of the id, so every process and every retry picks the same clicks.
    """
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(click_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def check_token(token: str) -> None:
    """Raises ValueError unless ``token`` can name a pipeline in the registry."""
    if not token or "#" in token:
        raise ValueError(
            f"the registration token must be non-empty and without '#' "
            f"(it separates the click's occurrence), got {token!r}"
        )


class RegisterJoins(beam.DoFn):
    """Lets a join candidate out only once its click id is registered."""

    def __init__(
        self, target: BigtableTarget, token: str, params: RegistryParams
    ) -> None:
        check_token(token)
        self._target = target
        self._token = token
        self._params = params
        counter = lambda name: Metrics.counter(METRICS_NAMESPACE, name)  # noqa: E731
        self._joined = counter("clicks_joined")
        self._wasted = counter("wasted_joins")
        self._repeated = counter("duplicate_clicks")
        self._retried = counter("registrations_already_mine")
        self._too_old = counter("unjoinable_older_than_gc_horizon")
        self._lost = counter("lost_after_register")
        self._batches = Metrics.distribution(METRICS_NAMESPACE, "registration_batch")

    def setup(self) -> None:
        self._registry = IdRegistry(
            self._target,
            self._params.gc_days,
            layout=self._params.layout,
            max_in_flight=self._params.max_in_flight,
        )

    def teardown(self) -> None:
        registry = getattr(self, "_registry", None)
        if registry is not None:
            registry.close()

    def start_bundle(self) -> None:
        self._buffer: list[WindowedValue] = []
        # Candidates past the GC horizon, with why: looked up, not registered.
        self._too_old_buffer: list[tuple[WindowedValue, str]] = []

    def process(
        self,
        candidate: JoinedClick,
        timestamp=beam.DoFn.TimestampParam,
        window=beam.DoFn.WindowParam,
    ) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        reason = older_than_horizon(
            candidate.click.event_time,
            self._params.age_clock_ms(),
            self._params.gc_days,
        )
        held = WindowedValue(candidate, timestamp, (window,))
        if reason is not None:
            self._too_old_buffer.append((held, reason))
        else:
            self._buffer.append(held)
        if len(self._buffer) + len(self._too_old_buffer) >= self._params.max_batch:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        yield from self._flush()

    def _flush(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        yield from self._flush_too_old()
        yield from self._flush_young()

    def _flush_too_old(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        batch, self._too_old_buffer = self._too_old_buffer, []
        if not batch:
            return
        clicks = [_click_ref(held.value) for held, _ in batch]
        holders = self._registry.owners(clicks)
        for (held, reason), click in zip(batch, clicks, strict=True):
            if holders.get(click.click_id) == occurrence_token(self._token, click):
                self._retried.inc()
                yield from self._output(held)
                continue
            self._too_old.inc()
            rejected = UnjoinableClick(
                click=held.value.click,
                reason=UnjoinableClick.OLDER_THAN_GC_HORIZON,
                detail=reason,
            )
            yield beam.pvalue.TaggedOutput(UNJOINABLE, held.with_value(rejected))

    def _flush_young(self) -> Iterator[WindowedValue | beam.pvalue.TaggedOutput]:
        batch, self._buffer = self._buffer, []
        if not batch:
            return
        self._batches.update(len(batch))
        clicks = [_click_ref(candidate.value) for candidate in batch]
        outcomes = self._registry.register_many(clicks, self._token)
        for candidate, outcome in zip(batch, outcomes, strict=True):
            if outcome is Outcome.DUPLICATE:
                self._wasted.inc()
                yield beam.pvalue.TaggedOutput(WASTED, candidate)
                continue
            if outcome is Outcome.REPEATED:
                self._repeated.inc()
                continue
            if outcome is Outcome.ALREADY_MINE:
                self._retried.inc()
            yield from self._output(candidate)

    def _output(self, candidate: WindowedValue) -> Iterator[WindowedValue]:
        """A registered candidate as ``joined``, unless the test-only fault
        injection drops it here."""
        click_id = candidate.value.click.click_id
        if lost_after_register(click_id, self._params.fail_after_register_fraction):
            self._lost.inc()
            return
        self._joined.inc()
        yield candidate


def _click_ref(candidate: JoinedClick) -> ClickRef:
    click = candidate.click
    return ClickRef(
        click.click_id, click.event_time, candidate.occurrence, click.query_id
    )

"""Strong and weak productions: how MillWheel's exactly-once output maps to Beam.

A *production* is a record a computation sends downstream. When a worker
fails mid-way its input is retried, so every production may be produced
twice; MillWheel offers two ways to make that harmless.

**Strong productions.** MillWheel checkpoints the productions together with
the state change, atomically, *before* sending them. A retry re-sends the
checkpointed records instead of recomputing them, so downstream sees the same
records even if the computation is non-deterministic (wall clock, random
sampling, an external lookup whose answer changes). In Beam the runner
already commits state and outputs of a bundle atomically; what is left is
non-determinism *across* a retry of the producing step. The remedy is a
stable-input checkpoint in front of the non-deterministic step:
``StrongProduction(step)`` puts a ``Reshuffle`` before ``step``, so a retry of
``step`` replays the materialised input rather than re-running the
upstream computation. Runners that checkpoint at a shuffle (Dataflow, this
project's Spark runner, Flink with checkpointing) give the guarantee; the
step itself must still commit its side effects idempotently.

**Weak productions.** MillWheel may instead send first and checkpoint later,
and lets duplicates through to consumers that are idempotent. In Beam this
is the cheaper default: no extra shuffle, but every side effect must be an
overwrite of the same thing. Write to Bigtable under a row key computed only
from the record (``deterministic_row_key``), with explicit cell timestamps;
write files under names derived from the window and shard, never from the
clock. Then a retried write lands on the same cell or file and changes
nothing.

Use strong productions when the step is non-deterministic or its side effect
is not an overwrite (an external counter, a notification); weak ones
otherwise.
"""

from __future__ import annotations

import hashlib

import apache_beam as beam

_SEPARATOR = b"#"
_ESCAPE = b"\\"


class StrongProduction(beam.PTransform):
    """Checkpoint the input, then apply ``step``: ``Reshuffle() | step``.

    Elements, timestamps and windows pass through the ``Reshuffle``
    unchanged; what changes is that ``step`` is retried from the checkpoint
    rather than from recomputed upstream results.
    """

    def __init__(self, step: beam.PTransform, label: str | None = None) -> None:
        super().__init__(label)
        self._step = step

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "Checkpoint" >> beam.Reshuffle() | "Step" >> self._step


def _escape(part: str | bytes | int) -> bytes:
    raw = part if isinstance(part, bytes) else str(part).encode()
    # Escaping keeps ("a#", "b") and ("a", "#b") on different rows.
    return raw.replace(_ESCAPE, _ESCAPE * 2).replace(_SEPARATOR, _ESCAPE + _SEPARATOR)


def deterministic_row_key(*parts: str | bytes | int) -> bytes:
    """A Bigtable row key that depends only on ``parts``: the weak-production key.

    The parts are joined with ``#`` (escaped inside parts) behind a
    four-hex-digit hash prefix, so that keys that grow together (times,
    sequential ids) spread across tablets instead of hammering one.
    """
    if not parts:
        raise ValueError("deterministic_row_key needs at least one part")
    body = _SEPARATOR.join(_escape(part) for part in parts)
    prefix = hashlib.blake2b(body, digest_size=2).hexdigest().encode()
    return prefix + _SEPARATOR + body

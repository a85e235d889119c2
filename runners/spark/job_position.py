"""Where a streaming job stands after its last committed batch, as the
commit log records it (``commits/<N>.json``)."""

from __future__ import annotations

import base64
import pickle
from dataclasses import asdict, dataclass, field

from runners.spark.durable_store import GroupSummary
from runners.spark.metrics import MetricsSnapshot
from runners.spark.micro_batch_task import PushedBack
from runners.spark.watermark import MAX_MICROS, MIN_MICROS


@dataclass
class Remainder:
    """A deferred splittable-DoFn remainder, due at ``ready_at`` (µs)."""

    stage: str
    element: bytes
    ready_at: int
    watermark: int


def _encode(element: bytes) -> str:
    return base64.b64encode(element).decode()


@dataclass
class JobPosition:
    """Where the job stands after its last committed batch."""

    next_batch: int = 0
    processing_time: int = MIN_MICROS
    impulse_done: bool = False
    test_streams: dict[str, int] = field(default_factory=dict)
    groups: dict[str, dict[int, GroupSummary]] = field(default_factory=dict)
    # Every key group that has a state file, idle or not: a file found gone
    # on restart is state lost, not a group never used.
    stored: dict[str, set[int]] = field(default_factory=dict)
    remainders: list[Remainder] = field(default_factory=list)
    pushed: list[PushedBack] = field(default_factory=list)
    # Stage -> [its remainders' watermark, processing time it last moved].
    source_progress: dict[str, list[int]] = field(default_factory=dict)
    watermarks: dict[str, int] = field(default_factory=dict)
    metrics: MetricsSnapshot = field(default_factory=MetricsSnapshot)
    # Draining: unbounded sources have stopped; the job ends once every
    # watermark is +inf and every event-time timer has fired.
    draining: bool = False
    # Triggered side-input PCollections the last batch added elements to:
    # they may now have a pane for elements pushed back on them.
    side_grown: list[str] = field(default_factory=list)

    def to_record(self) -> dict:
        return {
            "next_batch": self.next_batch,
            "processing_time": self.processing_time,
            "impulse_done": self.impulse_done,
            "test_streams": self.test_streams,
            "groups": [
                asdict(s) for stage in self.groups.values() for s in stage.values()
            ],
            "stored": {stage: sorted(g) for stage, g in self.stored.items()},
            "remainders": [
                {**asdict(r), "element": _encode(r.element)} for r in self.remainders
            ],
            "pushed": [
                {**asdict(p), "element": _encode(p.element)} for p in self.pushed
            ],
            "source_progress": self.source_progress,
            "watermarks": self.watermarks,
            "metrics": base64.b64encode(pickle.dumps(self.metrics)).decode(),
            "draining": self.draining,
            "side_grown": self.side_grown,
        }

    @classmethod
    def from_record(cls, record: dict) -> JobPosition:
        groups: dict[str, dict[int, GroupSummary]] = {}
        for raw in record["groups"]:
            summary = GroupSummary(**raw)
            groups.setdefault(summary.stage, {})[summary.group] = summary
        return cls(
            next_batch=record["next_batch"],
            processing_time=record["processing_time"],
            impulse_done=record["impulse_done"],
            test_streams=record["test_streams"],
            groups=groups,
            # Commits written before the key was added record none.
            stored={stage: set(g) for stage, g in record.get("stored", {}).items()},
            remainders=[
                Remainder(**{**r, "element": base64.b64decode(r["element"])})
                for r in record["remainders"]
            ],
            pushed=[
                PushedBack(**{**p, "element": base64.b64decode(p["element"])})
                for p in record["pushed"]
            ],
            source_progress=record["source_progress"],
            watermarks=record["watermarks"],
            metrics=pickle.loads(base64.b64decode(record["metrics"])),
            draining=record.get("draining", False),
            side_grown=record.get("side_grown", []),
        )

    def source_holds(
        self, now: int, idle_timeout: int, resumed_at: int | None = None
    ) -> dict[str, int]:
        """Each splittable DoFn stage's hold: the watermark its remainders
        report, or, once it has stood still for the idle timeout, the
        processing time less the timeout (an idle source stops holding the
        pipeline back, as an injector with no pending input would). With
        ``resumed_at``, the remainders a batch at that time resumes hold
        nothing: they report anew when they run."""
        holds: dict[str, int] = {}
        for remainder in self.remainders:
            if resumed_at is not None and remainder.ready_at <= resumed_at:
                continue
            holds[remainder.stage] = min(
                holds.get(remainder.stage, MAX_MICROS), remainder.watermark
            )
        if idle_timeout > 0:
            for stage, hold in holds.items():
                _, since = self.source_progress.get(stage, (hold, now))
                if now - since >= idle_timeout:
                    holds[stage] = max(hold, now - idle_timeout)
        return holds

    def track_sources(self, now: int) -> None:
        """Notes when each source stage's reported watermark last moved."""
        current: dict[str, int] = {}
        for remainder in self.remainders:
            current[remainder.stage] = min(
                current.get(remainder.stage, MAX_MICROS), remainder.watermark
            )
        progress = {}
        for stage, mark in current.items():
            previous = self.source_progress.get(stage)
            moved = previous is None or mark > previous[0]
            progress[stage] = [mark, now] if moved else previous
        self.source_progress = progress

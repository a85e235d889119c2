"""What one task of a micro-batch runs, and the records it sends the driver.

A stage's task runs the stage executor under the batch's watermark and
processing time (``MicroBatchTime``), over durable key groups when the stage
is keyed. Besides its outputs it yields, tagged ``META``, what the driver
must learn: each touched key group's :class:`GroupSummary`, each deferred
splittable-DoFn remainder (:class:`Deferred`), each element held back for
its side inputs (:class:`PushedBack`), and the task's metrics (a
``MetricsSnapshot``), which ride with its cached output so that a retried
task downstream neither loses nor repeats them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import TaskContext

from runners.spark.components import context_from_bytes
from runners.spark.keyed import decode_with_bytes
from runners.spark.plan import StagePlan
from runners.spark.side_inputs import FirstPanes
from runners.spark.stage_executor import META, StageExecutor
from runners.spark.streaming_state import DurableStageState, KeyGroups, key_group
from runners.spark.watermark import (
    MAX_MICROS,
    MIN_MICROS,
    MicroBatchTime,
    event_horizon,
)

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deferred:
    """A splittable DoFn's remainder, to resume in a later batch."""

    stage: str
    element: bytes
    delay_micros: int
    watermark: int


@dataclass(frozen=True)
class EarlyWatermark:
    """How a stage reading a source's output straight from this batch learns
    the watermark the source leaves, without waiting a batch for the driver.

    The source's tasks run before this stage's (a shuffle separates them),
    and each writes the watermark its deferred remainders report into
    ``report_dir``. The stage's input watermark is then the smaller of
    ``without_source`` (what the driver computed with the source's resumed
    remainders taken out) and those reports.
    """

    without_source: int
    report_dir: str
    reports: int


@dataclass(frozen=True)
class PushedBack:
    """An element whose side inputs were not ready: held for a later batch."""

    stage: str
    element: bytes
    timestamp: int
    side_watermark: int


@dataclass(frozen=True)
class SideChunk:
    """Encoded elements of a side-input PCollection produced in the batch."""

    pcollection: str
    data: bytes


@dataclass(frozen=True)
class TaskSpec:
    """What a stage's task needs besides its records (shipped in closures)."""

    stage: str
    state_dir: str
    key_groups: int
    batch: int
    input_watermark: int
    output_watermark: int
    processing_time: int
    # The minimum of the stage's side inputs' watermarks (+inf: none).
    side_watermark: int = MAX_MICROS
    # Records a splittable DoFn's bundle may output before it is
    # checkpointed (None: no cap).
    max_records: int | None = None
    # A source stage: where its tasks report the watermark they leave.
    report_dir: str | None = None
    # A stage fed straight by a source of this batch.
    early: EarlyWatermark | None = None

    def with_early_watermark(self) -> TaskSpec:
        """This task with its input watermark raised to what the source
        upstream reported in this batch (itself if a report is missing)."""
        early = self.early
        if early is None:
            return self
        reports = []
        for part in range(early.reports):
            try:
                reports.append(int(Path(early.report_dir, str(part)).read_text()))
            except FileNotFoundError:
                return self
        raised = min([early.without_source, *reports])
        if raised <= self.input_watermark:
            return self
        return dataclasses.replace(self, input_watermark=raised, early=None)

    def report_watermark(self, deferred: list[Deferred], partition: int) -> None:
        """A source's task: the watermark its remainders leave (+inf: none
        left), for the stages downstream in the same batch."""
        if self.report_dir is None:
            return
        mark = min((d.watermark for d in deferred), default=MAX_MICROS)
        path = Path(self.report_dir, str(partition))
        staged = path.with_suffix(".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged.write_text(str(mark))
            os.replace(staged, path)
        except OSError as error:
            # The report only lets the stages downstream start early: without
            # it they run under the planned watermark, and the state this task
            # committed stands.
            _LOGGER.warning(
                "SparkRunner streaming: watermark report %s not written (%s); "
                "the stages it feeds run under the planned watermark",
                path,
                error,
            )
            staged.unlink(missing_ok=True)

    def event_horizon(self) -> int:
        """Event-time timers at or before this (µs) are due."""
        return event_horizon(self.input_watermark)


def key_group_elements(
    components: bytes, windowed_kv_coder_id: str, key_groups: int, chunks
) -> Iterator[tuple[int, bytes]]:
    """Splits chunks of windowed KVs into (key group, encoded element)."""
    coder = context_from_bytes(components).coders[windowed_kv_coder_id]
    impl = coder.get_impl()
    key_impl = coder.wrapped_value_coder.key_coder().get_impl()
    for chunk in chunks:
        for wv, raw in decode_with_bytes(chunk, impl):
            yield key_group(key_impl.encode_nested(wv.value[0]), key_groups), raw


def _deferred(stage: str, residual: Any) -> Deferred:
    delay = residual.requested_time_delay
    marks = [
        ts.seconds * 1_000_000 + ts.nanos // 1000
        for ts in residual.application.output_watermarks.values()
    ]
    return Deferred(
        stage,
        residual.application.element,
        delay.seconds * 1_000_000 + delay.nanos // 1000,
        min(marks) if marks else MIN_MICROS,
    )


def _elements(records: Iterable[Any], keyed: KeyGroups | None) -> Iterator:
    """Encoded elements of a task's records; a keyed task's record is
    (key group, element), and opening its group as it arrives also opens
    the groups woken for due timers, whose elements are empty."""
    if keyed is None:
        return iter(records)
    return (raw for group, raw in records if keyed.group(group) and raw)


def _ready_or_pushed(
    chunks: Iterable[bytes],
    plan: StagePlan,
    components: bytes,
    task: TaskSpec,
    entries: Iterable[tuple[bytes, bytes]],
    pushed: list[PushedBack],
) -> Iterator[bytes]:
    """Elements whose windows' side inputs are ready; the others go to
    ``pushed``. A side input is ready for a window once its watermark has
    passed the window's end (every element of it has been produced in an
    earlier batch) or, if it is triggered, once it has a pane for the
    window (:class:`FirstPanes`)."""
    context = context_from_bytes(components)
    impl = context.coders[plan.input_coder_id].get_impl()
    first_panes = FirstPanes(plan.side_inputs, context, entries)
    for chunk in chunks:
        for wv, raw in decode_with_bytes(chunk, impl):
            if task.side_watermark >= MAX_MICROS or all(
                task.side_watermark > w.max_timestamp().micros or first_panes.ready(w)
                for w in wv.windows
            ):
                yield raw
            else:
                held = PushedBack(
                    task.stage, raw, wv.timestamp.micros, task.side_watermark
                )
                pushed.append(held)


def stage_partition(
    plan: StagePlan,
    components: bytes,
    bundle_bytes: int,
    task: TaskSpec,
    side_bc: Any,
    records: Iterable[Any],
) -> Iterator[tuple[int, Any]]:
    """Spark ``mapPartitions`` body of a stage in a micro-batch."""
    # Timers fire only after the task's last input element, so the whole
    # task may run under the watermark the source upstream left in this
    # batch: the elements it emitted arrive before any timer it makes due.
    task = task.with_early_watermark()
    time = MicroBatchTime(task.input_watermark, task.processing_time, task.max_records)
    state, groups = None, None
    entries = side_bc.value if side_bc is not None else ()
    if plan.stateful:
        groups = KeyGroups(task.state_dir, task.stage, task.key_groups, task.batch)
        key_coder = context_from_bytes(components).coders[plan.key_coder_id]
        state = DurableStageState(groups, entries, plan.timer_families, key_coder)
    inputs = _elements(records, groups)
    pushed: list[PushedBack] = []
    if plan.side_inputs:
        inputs = _ready_or_pushed(inputs, plan, components, task, entries, pushed)
    executor = StageExecutor(plan, entries, bundle_bytes, state=state, time=time)
    try:
        yield from executor.run(inputs)
        summaries = executor.state.commit()
    except BaseException:
        executor.state.abandon()
        raise
    if executor.metrics:
        yield META, executor.metrics
    deferred = [_deferred(task.stage, residual) for residual in time.deferred]
    task.report_watermark(deferred, TaskContext.get().partitionId())
    for summary in summaries:
        yield META, summary
    for remainder in deferred:
        yield META, remainder
    for element in pushed:
        yield META, element

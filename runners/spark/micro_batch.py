"""One micro-batch of a streaming pipeline as RDD lineage, run as one Spark job.

The graph is the batch runner's (same fusion, same stage executor); what a
batch reads and how keyed work is partitioned differ:

- an Impulse emits in the first batch only; a TestStream's outputs carry the
  batch's scripted elements (``test_stream_source.py``);
- a stateful stage, or a GroupByKey, is partitioned by key group: each task
  opens the key groups it has elements for, plus those the driver wakes for
  a due timer, and commits them when it ends (``streaming_state.py``,
  ``streaming_gbk.py``);
- every stage runs under the batch's watermark and processing time
  (``MicroBatchTime``): due timers fire, and a splittable DoFn's deferred
  remainder goes back to the driver instead of being resumed;
- what the driver must learn (each touched key group's next timers and
  hold, each deferred remainder) comes back as tagged records, collected
  by the batch's one Spark job together with the stages nothing reads.

A PCollection known to be empty in the batch (no scripted elements, no
input and nothing due upstream) has no RDD at all, so a batch that only
fires one stage's timers runs only that stage, and a batch with nothing to
do runs no Spark job.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import common
from apache_beam.runners.portability.fn_api_runner.translations import only_element

from runners.spark.driver_stages import EXECUTABLE_STAGE, IMPULSE, side_pcollections
from runners.spark.keyed import round_robin_partition
from runners.spark.metrics import MetricsSnapshot
from runners.spark.micro_batch_task import (
    META,
    EarlyWatermark,
    SideChunk,
    TaskSpec,
    key_group_elements,
    stage_partition,
)
from runners.spark.plan import StagePlan
from runners.spark.side_expiry import SideExpiry
from runners.spark.streaming_gbk import group_streaming
from runners.spark.test_stream_source import TEST_STREAM_URN
from runners.spark.translation import FLATTEN, GROUP_BY_KEY, RddTranslator
from runners.spark.watermark import MAX_MICROS
from runners.spark.watermark_manager import Watermarks
from transforms.millwheel.state_params import declared_state_params


@dataclass
class BatchSpec:
    """Everything one batch reads, as its offsets record logs it."""

    batch: int
    processing_time: int
    watermarks: Watermarks
    impulse: bool
    elements: dict[str, list[bytes]] = field(default_factory=dict)
    due_groups: dict[str, list[int]] = field(default_factory=dict)
    # Elements fed to a stage again: deferred remainders whose delay has
    # passed, and pushed-back elements whose side inputs have moved.
    resumed: dict[str, list[bytes]] = field(default_factory=dict)
    # TestStream script -> the events [start, end) the batch applies.
    test_stream_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    test_stream_records: int = 0
    # Source stages whose remainders the batch resumes: their tasks report
    # the watermark they leave under ``reports_dir``, and the watermarks
    # computed without those remainders' holds (``EarlyWatermark``).
    reporting: set[str] = field(default_factory=set)
    reports_dir: str = ""
    released: Watermarks | None = None


def stage_key(name: str) -> str:
    """A stable directory name for a stage's state."""
    return hashlib.sha1(name.encode()).hexdigest()[:16]


class MicroBatchTranslator(RddTranslator):
    """Builds and runs the lineage of one batch at a time."""

    @property
    def components_bytes(self) -> bytes:
        """The serialised components every task rebuilds coders from."""
        return self._shipped

    @property
    def windowed_coders(self) -> dict[str, str]:
        """PCollection -> its windowed-value coder id."""
        return self._windowed

    def __init__(
        self,
        pipeline,
        sc,
        options,
        state_root: str,
        key_groups: int,
        max_records: int | None = None,
    ):
        super().__init__(pipeline, sc, options)
        self._max_records = max_records
        # The driver holds no stage's output between batches.
        self._driver_stages = set()
        self._state_root = state_root
        self.key_groups = key_groups
        self._plans: dict[str, StagePlan] = {}
        self._spec: BatchSpec | None = None
        self._empty: set[str] = set()
        self._meta: list[Any] = []
        self.primitives = self._primitives()
        # Stage -> the PCollections it reads as side inputs.
        self.side_inputs = {
            p.unique_name: side_pcollections(p)
            for p in self.primitives
            if side_pcollections(p)
        }
        self._side_pcollections = {
            pc for pcs in self.side_inputs.values() for pc in pcs
        }
        # Side inputs with a trigger of their own: ready for a window at
        # their first pane (``FirstPanes``), not only at their watermark.
        strategies = self._components.windowing_strategies
        self.triggered_side_inputs = {
            pc
            for pc in self._side_pcollections
            if not strategies[
                self._components.pcollections[pc].windowing_strategy_id
            ].trigger.HasField("default")
        }
        # When their windows expire (`side_expiry.py`).
        self.side_expiry = SideExpiry(
            self.primitives,
            self._components,
            lambda pc: self.windowed_coder(pc).window_coder,
        )
        self._side_contents: dict[str, list[bytes]] = {}

    def set_side_contents(self, contents: dict[str, list[bytes]]) -> None:
        """Side inputs as of the batches committed so far: what a stage of
        the next batch reads. (A side input produced in batch N is read from
        batch N+1 on, once the watermark says whether it is complete.)"""
        self._side_contents = contents

    def keyed_stages(self) -> list[str]:
        """Unique names of the transforms that keep keyed state."""
        return [p.unique_name for p in self.primitives if self._is_keyed(p)]

    def keyed_windowing(self) -> dict[str, str]:
        """Per keyed stage, its input's windowing (`windowing_digest`): state
        and timers are kept per window, so a checkpoint's cannot be resumed
        under other windows (a window size changed between two runs)."""
        strategies = self._components.windowing_strategies
        pcollections = self._components.pcollections
        return {
            p.unique_name: windowing_digest(
                strategies[pcollections[pc].windowing_strategy_id]
            )
            for p in self.primitives
            if self._is_keyed(p)
            for pc in sorted(_main_inputs(p))
        }

    def state_params(self) -> dict[str, Any]:
        """Per transform that declares them, the parameters its state is
        kept under (`transforms.millwheel.state_params`): a window size or a
        shard count the checkpoint's state cannot be read under another
        value of."""
        declared = {}
        for primitive in self.primitives:
            for step in _steps(primitive):
                params = declared_state_params(step.annotations)
                if params is not None:
                    declared[_declaring_transform(step)] = params
        return declared

    def _is_keyed(self, proto: beam_runner_api_pb2.PTransform) -> bool:
        if proto.spec.urn == GROUP_BY_KEY:
            return True
        if proto.spec.urn != EXECUTABLE_STAGE:
            return False
        payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(
            proto.spec.payload
        )
        return bool(payload.user_states or payload.timers)

    def run_batch(self, spec: BatchSpec) -> tuple[list[Any], MetricsSnapshot]:
        """Runs one batch; returns its driver records and metrics."""
        self._spec = spec
        self._rdds, self._empty = {}, set()
        # A reporting source's output -> (its report directory, its tasks).
        self._reports: dict[str, tuple[str, int]] = {}
        self._on_driver = {
            pc: self._side_contents.get(pc, []) for pc in self._side_pcollections
        }
        self._meta, self.leaves = [], []
        try:
            self.translate()
            wanted = self._meta + [leaf.filter(_never) for leaf in self.leaves]
            if not wanted:
                return [], MetricsSnapshot()
            self._sc.setJobDescription(f"micro-batch {spec.batch}")
            try:
                records = self._few_tasks(self._sc.union(wanted)).collect()
            finally:
                self._sc.setJobDescription(None)
        finally:
            self.unpersist()
        # A task's metrics come as a driver record of its cached partition,
        # not through an accumulator: a task that computed the partition and
        # then failed downstream had its accumulator updates dropped, and
        # its retry read the cached partition without counting again.
        metrics = MetricsSnapshot()
        others = []
        for record in records:
            if isinstance(record, MetricsSnapshot):
                metrics.merge(record)
            else:
                others.append(record)
        return others, metrics

    def _translate_if_ready(self, proto: beam_runner_api_pb2.PTransform) -> bool:
        known = self._rdds.keys() | self._empty
        if any(pc not in known for pc in proto.inputs.values()):
            return False
        self._translate_one(proto)
        for pc in proto.outputs.values():
            if pc in self._side_pcollections and pc in self._rdds:
                chunks = self._rdds[pc].map(functools.partial(SideChunk, pc))
                self._meta.append(chunks)
        return True

    def _translate_one(self, proto: beam_runner_api_pb2.PTransform) -> None:
        urn = proto.spec.urn
        outputs = list(proto.outputs.values())
        main = _main_inputs(proto)
        if urn == IMPULSE:
            self._impulse(only_element(outputs))
        elif urn == TEST_STREAM_URN:
            for pc in outputs:
                self._from_driver(pc, self._spec.elements.get(pc, []))
        elif all(pc in self._empty for pc in main) and not (
            self._spec.due_groups.get(proto.unique_name)
            or self._spec.resumed.get(proto.unique_name)
        ):
            self._empty.update(outputs)
        elif urn == FLATTEN:
            inputs = [
                self._rdds[pc] for pc in proto.inputs.values() if pc in self._rdds
            ]
            self._set(only_element(outputs), self._few_tasks(self._sc.union(inputs)))
        elif urn == GROUP_BY_KEY:
            self._group_streaming(proto)
        elif urn == EXECUTABLE_STAGE:
            self._streaming_stage(proto)
        elif not super()._translate_if_ready(proto):
            raise RuntimeError(f"SparkRunner streaming: cannot run {proto.unique_name}")

    def _few_tasks(self, rdd):
        """`rdd` in at most as many tasks as the job runs at once. A batch is
        small, and a task's fixed cost (a Python worker's round trip, a
        bundle) is most of its time: a union's partitions, and the stages
        they chain, run in turn within a task rather than a task each."""
        if rdd.getNumPartitions() <= self._parallelism:
            return rdd
        return rdd.coalesce(self._parallelism)

    def _impulse(self, pcoll: str) -> None:
        if self._spec.impulse:
            self._from_driver(pcoll, [common.ENCODED_IMPULSE_VALUE])
        else:
            self._empty.add(pcoll)

    def _from_driver(self, pcoll: str, chunks: list[bytes]) -> None:
        if chunks:
            self._set(pcoll, self._sc.parallelize(chunks, 1))
        else:
            self._empty.add(pcoll)

    def _task(self, proto) -> TaskSpec:
        name = proto.unique_name
        marks = self._spec.watermarks
        sides = [marks.pcollections[pc] for pc in self.side_inputs.get(name, ())]
        early = None
        released = self._spec.released
        mains = list(_main_inputs(proto))
        # Only where the one source resumed in the batch is all the stage
        # reads: ``released`` leaves out every resumed source's hold, and the
        # reports stand in for this source's alone.
        if (
            released is not None
            and len(self._spec.reporting) == 1
            and not sides
            and mains
            and all(pc in self._reports for pc in mains)
        ):
            report_dir, reports = self._reports[mains[0]]
            early = EarlyWatermark(released.inputs[name], report_dir, reports)
        return TaskSpec(
            stage=name,
            state_dir=f"{self._state_root}/{stage_key(name)}",
            key_groups=self.key_groups,
            batch=self._spec.batch,
            input_watermark=marks.inputs[name],
            output_watermark=marks.output_of(name, proto.outputs.values()),
            processing_time=self._spec.processing_time,
            side_watermark=min(sides, default=MAX_MICROS),
            max_records=self._max_records,
            early=early,
        )

    def _main_input(self, name: str, in_pc: str):
        """The stage's input in this batch, with the elements fed to it again
        (resumed remainders, pushed-back elements), or None."""
        rdd = self._rdds.get(in_pc)
        again = self._spec.resumed.get(name)
        if again:
            extra = self._sc.parallelize(again, 1)
            rdd = extra if rdd is None else rdd.union(extra)
        return rdd

    def _by_key_group(self, proto, in_pc: str, coder_id: str):
        """The stage's input as (key group, element), plus a wake-up record
        per key group with a due timer, partitioned by key group."""
        parts = []
        main = self._main_input(proto.unique_name, in_pc)
        if main is not None:
            parts.append(
                main.mapPartitions(
                    functools.partial(
                        key_group_elements, self._shipped, coder_id, self.key_groups
                    )
                )
            )
        due = self._spec.due_groups.get(proto.unique_name, [])
        if due:
            parts.append(self._sc.parallelize([(g, b"") for g in due], 1))
        rdd = parts[0] if len(parts) == 1 else self._sc.union(parts)
        return rdd.partitionBy(self._parallelism, round_robin_partition)

    def _group_streaming(self, proto) -> None:
        in_pc = only_element(proto.inputs.values())
        out_pc = only_element(proto.outputs.values())
        task = self._task(proto)
        body = functools.partial(
            group_streaming,
            self._shipped,
            self._windowed[in_pc],
            self._windowed[out_pc],
            self._components.pcollections[in_pc].windowing_strategy_id,
            task,
        )
        tagged = self._by_key_group(proto, in_pc, self._windowed[in_pc]).mapPartitions(
            body
        )
        self._split_tagged(tagged, [out_pc])

    def _streaming_stage(self, proto) -> None:
        plan = self._plans.get(proto.unique_name)
        if plan is None:
            plan = self._plans[proto.unique_name] = self._plan(proto)
        task = self._task(proto)
        if plan.stateful:
            rdd = self._by_key_group(proto, plan.input_pcollection, plan.input_coder_id)
        else:
            rdd = self._main_input(proto.unique_name, plan.input_pcollection)
        if proto.unique_name in self._spec.reporting:
            # A source resumed in this batch: the stages it feeds learn the
            # watermark it leaves in this same batch.
            report_dir = f"{self._spec.reports_dir}/{stage_key(proto.unique_name)}"
            task = dataclasses.replace(task, report_dir=report_dir)
            for pc in proto.outputs.values():
                self._reports[pc] = (report_dir, rdd.getNumPartitions())
        body = functools.partial(
            stage_partition,
            plan,
            self._shipped,
            self._bundle_bytes,
            task,
            self._side_input_broadcast(plan),
        )
        self._split_tagged(rdd.mapPartitions(body), plan.outputs)

    def _split_tagged(self, tagged, outputs: list[str]) -> None:
        """Outputs by tag; driver records (tag META) into the batch's collect."""
        tagged = self._persist(tagged)
        self._meta.append(tagged.filter(functools.partial(_has_tag, META)).values())
        for ix, pcoll in enumerate(outputs):
            self._set(pcoll, tagged.filter(functools.partial(_has_tag, ix)).values())


def windowing_digest(strategy: beam_runner_api_pb2.WindowingStrategy) -> str:
    """A short digest of what a windowing strategy does, the same in every
    process that builds the same pipeline: the window function and the
    trigger, lateness and accumulation, without the strategy's coder and
    environment ids (names the pipeline's construction hands out) or a
    pickled window function's bytes (pickles of equal functions may
    differ)."""
    what = beam_runner_api_pb2.WindowingStrategy()
    what.CopyFrom(strategy)
    what.ClearField("window_coder_id")
    what.ClearField("environment_id")
    if what.window_fn.urn == python_urns.PICKLED_WINDOWFN:
        what.window_fn.ClearField("payload")
    return hashlib.sha256(what.SerializeToString(deterministic=True)).hexdigest()[:16]


def _main_inputs(proto: beam_runner_api_pb2.PTransform) -> set[str]:
    """What a primitive reads element by element. (A stage may read one
    PCollection both ways, so side inputs cannot simply be subtracted.)"""
    if proto.spec.urn != EXECUTABLE_STAGE:
        return set(proto.inputs.values())
    payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(proto.spec.payload)
    return {payload.input}


# The steps a splittable DoFn is expanded into; the drain plan's has one more.
_SDF_COMPONENTS = frozenset(
    urn.urn
    for urn in (
        common_urns.sdf_components.PAIR_WITH_RESTRICTION,
        common_urns.sdf_components.SPLIT_AND_SIZE_RESTRICTIONS,
        common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS,
        common_urns.sdf_components.TRUNCATE_SIZED_RESTRICTION,
    )
)


def _declaring_transform(step: beam_runner_api_pb2.PTransform) -> str:
    """The name a step's state parameters are recorded under: a splittable
    DoFn's, for each step of its expansion, so that a job and its drain plan
    (which truncates the restrictions in a step of its own) record the
    same."""
    if step.spec.urn in _SDF_COMPONENTS:
        return step.unique_name.rsplit("/", 1)[0]
    return step.unique_name


def _steps(
    proto: beam_runner_api_pb2.PTransform,
) -> list[beam_runner_api_pb2.PTransform]:
    """The transforms a primitive runs: a fused stage's steps (fusion keeps
    them, with their annotations, only in the stage's payload), or itself."""
    if proto.spec.urn != EXECUTABLE_STAGE:
        return [proto]
    payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(proto.spec.payload)
    return [payload.components.transforms[step] for step in payload.transforms]


def _never(_record) -> bool:
    return False


def _has_tag(ix: int, record: tuple[int, Any]) -> bool:
    return record[0] == ix

"""Translation of an optimised Beam pipeline into RDD lineage.

Every PCollection becomes an RDD of encoded windowed-value chunks:

- Impulse: a one-element RDD.
- Flatten: ``union``; outputs of one multi-output stage are read from its
  cached output in one pass.
- GroupByKey: a shuffle on encoded keys, then Beam's trigger driver.
- Reshuffle: elements spread over partitions (also splits restrictions of
  splittable DoFns before they are processed).
- Executable stage: ``mapPartitions`` through the stage executor, after a
  shuffle by key when the stage holds user state or timers; or, for the
  small Impulse-rooted stages of ``driver_stages``, a call on the driver.

RDDs read by more than one consumer are persisted so that user code, and
its side effects and metrics, run once.
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import common
from apache_beam.runners.portability.fn_api_runner.translations import (
    only_element,
)
from pyspark import SparkContext, StorageLevel

from runners.spark import keyed, side_inputs
from runners.spark.components import add_windowed_coders, context_from_bytes
from runners.spark.driver_stages import (
    EXECUTABLE_STAGE,
    IMPULSE,
    driver_stages,
    side_pcollections,
)
from runners.spark.metrics import (
    CachedPartitionMetrics,
    JobMetrics,
    JobMetricsParam,
    MetricsSnapshot,
)
from runners.spark.options import SparkOptions
from runners.spark.plan import StagePlan, build_stage_plan
from runners.spark.stage_executor import META, run_partition

FLATTEN = common_urns.primitives.FLATTEN.urn
GROUP_BY_KEY = common_urns.primitives.GROUP_BY_KEY.urn
RESHUFFLE = common_urns.composites.RESHUFFLE.urn

KNOWN_URNS = frozenset([IMPULSE, FLATTEN, GROUP_BY_KEY, RESHUFFLE])

_LOGGER = logging.getLogger(__name__)


def _is_primitive(transform: beam_runner_api_pb2.PTransform) -> bool:
    if transform.subtransforms:
        return False
    # A transform whose outputs are all its inputs computes nothing.
    return not transform.outputs or bool(
        set(transform.outputs.values()) - set(transform.inputs.values())
    )


class RddTranslator:
    """Builds the RDD lineage of one pipeline on one SparkContext."""

    def __init__(
        self,
        pipeline: beam_runner_api_pb2.Pipeline,
        sc: SparkContext,
        options: SparkOptions,
    ) -> None:
        self._pipeline = pipeline
        self._sc = sc
        # Options that came through the Job API may arrive as strings.
        parallelism = options.spark_default_parallelism
        self._parallelism = int(parallelism) if parallelism else sc.defaultParallelism
        if self._parallelism < 1:
            # Every shuffle would have no partition: the job would end DONE
            # with each grouped element dropped.
            raise ValueError(
                "SparkRunner: the session's spark.default.parallelism is "
                f"{self._parallelism}; give a positive one, or "
                "--spark_default_parallelism N"
            )
        self._bundle_bytes = int(options.spark_bundle_bytes)
        components = pipeline.components
        self._windowed = add_windowed_coders(components)
        self._components = components
        self._shipped = beam_runner_api_pb2.Components(
            coders=components.coders,
            windowing_strategies=components.windowing_strategies,
            environments=components.environments,
        ).SerializeToString()
        self._context = context_from_bytes(self._shipped)
        self.accumulator = sc.accumulator(JobMetrics(), JobMetricsParam())
        self._rdds: dict[str, Any] = {}
        # Each output of a multi-output stage: the stage's tagged (and
        # persisted) RDD and the output's tag in it.
        self._tagged_outputs: dict[str, tuple[Any, int]] = {}
        # Encoded chunks the driver holds: collected side inputs, Impulse
        # outputs and the outputs of the stages it runs itself.
        self._on_driver: dict[str, list[bytes]] = {}
        self._consumers = self._count_consumers()
        self._driver_stages = driver_stages(self._primitives())
        self._persisted: list[Any] = []
        self._broadcasts: list[Any] = []
        self.leaves: list[Any] = []
        self.stages = 0
        self.stages_on_driver = 0

    def windowed_coder(self, pcoll: str) -> Any:
        """The windowed-value coder of ``pcoll``'s elements."""
        return self._context.coders[self._windowed[pcoll]]

    def _primitives(self) -> list[beam_runner_api_pb2.PTransform]:
        transforms = self._components.transforms
        found = []

        def walk(transform_id: str) -> None:
            proto = transforms[transform_id]
            if _is_primitive(proto):
                found.append(proto)
            else:
                for sub in proto.subtransforms:
                    walk(sub)

        for root in self._pipeline.root_transform_ids:
            walk(root)
        return found

    def _count_consumers(self) -> collections.Counter:
        counts: collections.Counter = collections.Counter()
        for proto in self._primitives():
            counts.update(proto.inputs.values())
        return counts

    def translate(self) -> None:
        """Builds RDDs for every primitive in topological order.

        A stage that reads side inputs needs their contents on the driver
        (they are broadcast) before its RDD can be built, and each collect
        is a Spark job. So a primitive whose side inputs, or whose inputs'
        side inputs, are not collected yet waits; the others go on; and when
        nothing else can, the side inputs of all the waiting stages are
        collected together, in one job.
        """
        waiting = self._primitives()
        while waiting:
            blocked = [p for p in waiting if not self._translate_if_ready(p)]
            if len(blocked) == len(waiting):
                self._collect_side_inputs(blocked)
            waiting = blocked

    def _translate_if_ready(self, proto: beam_runner_api_pb2.PTransform) -> bool:
        side = side_pcollections(proto)
        if any(pc not in self._on_driver for pc in side):
            return False
        on_driver = proto.unique_name in self._driver_stages
        available = self._on_driver if on_driver else self._rdds
        if any(pc not in available for pc in proto.inputs.values() if pc not in side):
            return False
        urn = proto.spec.urn
        if urn == IMPULSE:
            out_pc = only_element(proto.outputs.values())
            self._on_driver[out_pc] = [common.ENCODED_IMPULSE_VALUE]
            self._set(out_pc, self._sc.parallelize([common.ENCODED_IMPULSE_VALUE], 1))
        elif urn == FLATTEN:
            inputs = self._flatten_inputs(list(proto.inputs.values()))
            rdd = self._sc.union(inputs) if inputs else self._sc.emptyRDD()
            self._set(only_element(proto.outputs.values()), rdd)
        elif urn == GROUP_BY_KEY:
            self._group_by_key(proto)
        elif urn == RESHUFFLE:
            self._reshuffle(proto)
        elif on_driver:
            self._run_on_driver(proto)
        elif urn == EXECUTABLE_STAGE:
            self._stage(proto)
        else:
            raise NotImplementedError(
                f"SparkRunner cannot run {proto.unique_name!r} ({urn})"
            )
        return True

    def _collect_side_inputs(self, blocked: list[beam_runner_api_pb2.PTransform]):
        wanted = list(
            dict.fromkeys(
                pc
                for proto in blocked
                for pc in side_pcollections(proto)
                if pc in self._rdds and pc not in self._on_driver
            )
        )
        if not wanted:
            names = ", ".join(proto.unique_name for proto in blocked)
            raise RuntimeError(f"SparkRunner: no translatable input for {names}")
        tagged = [
            self._rdds[pc].map(functools.partial(_with_tag, ix))
            for ix, pc in enumerate(wanted)
        ]
        _LOGGER.info(
            "SparkRunner: collecting %d side input(s) for %d waiting transform(s)",
            len(wanted),
            len(blocked),
        )
        self._sc.setJobDescription(f"side inputs of {blocked[0].unique_name}, ...")
        try:
            collected = self._sc.union(tagged).collect()
        finally:
            self._sc.setJobDescription(None)
        for ix, pc in enumerate(wanted):
            self._on_driver[pc] = [data for tag, data in collected if tag == ix]

    def _flatten_inputs(self, pcolls: list[str]) -> list[Any]:
        """The RDDs a Flatten unions. Two or more outputs of one multi-output
        stage (sinks' file names, say) are one filter over the stage's cached
        output: a task per partition, where an RDD per output costs a task
        per output and partition, each a round trip to a Python worker for a
        few elements. An output listed twice is still read twice."""
        rdds = []
        siblings: dict[int, dict[str, int]] = {}
        for pcoll in pcolls:
            if pcoll not in self._tagged_outputs:
                rdds.append(self._rdds[pcoll])
                continue
            tagged, tag = self._tagged_outputs[pcoll]
            same_stage = siblings.setdefault(id(tagged), {})
            if pcoll in same_stage:
                rdds.append(self._rdds[pcoll])
            else:
                same_stage[pcoll] = tag
        for same_stage in siblings.values():
            if len(same_stage) == 1:
                rdds.append(self._rdds[next(iter(same_stage))])
            else:
                tagged, _ = self._tagged_outputs[next(iter(same_stage))]
                rdds.append(self._read_cached(tagged, set(same_stage.values())))
        return rdds

    def _set(self, pcoll: str, rdd, *, cached: bool = False) -> None:
        """`rdd` is `pcoll`'s; read by more than one consumer, it is
        persisted unless `cached` (a filter over a persisted RDD)."""
        if self._consumers[pcoll] == 0:
            self.leaves.append(rdd)
        elif self._consumers[pcoll] > 1 and not cached:
            rdd = self._persist(rdd)
        self._rdds[pcoll] = rdd

    def finish(self) -> MetricsSnapshot:
        """Runs the stages whose outputs nothing reads; returns the job's
        metrics."""
        if self.leaves:
            _LOGGER.info(
                "SparkRunner: running the %d stage(s) whose output nothing reads",
                len(self.leaves),
            )
            self._sc.union(self.leaves).foreach(_discard)
        return self.accumulator.value.snapshot()

    def _persist(self, rdd):
        rdd = rdd.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(rdd)
        return rdd

    def unpersist(self) -> None:
        """Releases cached RDDs and side-input broadcasts once the job is done."""
        for rdd in self._persisted:
            rdd.unpersist()
        for broadcast in self._broadcasts:
            broadcast.destroy()
        self._persisted.clear()
        self._broadcasts.clear()

    def _group_by_key(self, proto: beam_runner_api_pb2.PTransform) -> None:
        in_pc = only_element(proto.inputs.values())
        out_pc = only_element(proto.outputs.values())
        strategy = self._components.pcollections[in_pc].windowing_strategy_id
        shipped = self._shipped
        in_coder = self._windowed[in_pc]
        rdd = (
            self._rdds[in_pc]
            .mapPartitions(functools.partial(keyed.key_elements, shipped, in_coder))
            .groupByKey(self._parallelism, keyed.stable_partition)
            .mapPartitions(
                functools.partial(
                    keyed.group_by_key_and_window,
                    shipped,
                    in_coder,
                    self._windowed[out_pc],
                    strategy,
                )
            )
        )
        self._set(out_pc, rdd)

    def _reshuffle(self, proto: beam_runner_api_pb2.PTransform) -> None:
        in_pc = only_element(proto.inputs.values())
        split = functools.partial(
            keyed.split_elements, self._shipped, self._windowed[in_pc]
        )
        # Not RDD.repartition: PySpark hands the JVM pickled batches of up to
        # a thousand elements, so a few small elements (files, row groups,
        # restrictions) would all land in one partition. Numbering them
        # round-robin and partitioning on that number spreads each element.
        rdd = (
            self._rdds[in_pc]
            .mapPartitions(split)
            .mapPartitionsWithIndex(keyed.number_round_robin)
            .partitionBy(self._parallelism, keyed.round_robin_partition)
            .values()
            .mapPartitions(lambda elements: [b"".join(elements)])
            .filter(bool)
        )
        self._set(only_element(proto.outputs.values()), rdd)

    def _plan(self, proto: beam_runner_api_pb2.PTransform) -> StagePlan:
        payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(
            proto.spec.payload
        )
        self.stages += 1
        return build_stage_plan(
            f"stage {self.stages}",
            proto,
            self._components,
            self._windowed,
            keyed=bool(payload.user_states or payload.timers),
        )

    def _run_on_driver(self, proto: beam_runner_api_pb2.PTransform) -> None:
        plan = self._plan(proto)
        self.stages_on_driver += 1
        _LOGGER.debug("SparkRunner: %s runs on the driver", proto.unique_name)
        outputs = list(
            run_partition(
                plan,
                self._side_input_entries(plan),
                self._on_driver[plan.input_pcollection],
                self._bundle_bytes,
                self.accumulator,
            )
        )
        for ix, pcoll in enumerate(plan.outputs):
            self._on_driver[pcoll] = [data for tag, data in outputs if tag == ix]

    def _stage(self, proto: beam_runner_api_pb2.PTransform) -> None:
        plan = self._plan(proto)
        rdd = self._rdds[plan.input_pcollection]
        if plan.stateful:
            rdd = (
                rdd.mapPartitions(
                    functools.partial(
                        keyed.key_elements, self._shipped, plan.input_coder_id
                    )
                )
                .partitionBy(self._parallelism, keyed.stable_partition)
                .values()
            )
        side_bc = self._side_input_broadcast(plan)
        outputs = plan.outputs
        # Cached, a partition's metrics ride in it, for its readers to add
        # (see `JobMetrics`).
        cached = len(outputs) > 1 or (
            len(outputs) == 1 and self._consumers[outputs[0]] > 1
        )
        body = functools.partial(
            _stage_partition,
            plan,
            side_bc,
            self._bundle_bytes,
            None if cached else self.accumulator,
        )
        # Named after the fused transforms, for the Spark UI and event log.
        tagged = rdd.mapPartitionsWithIndex(body).setName(proto.unique_name)
        if not outputs:
            self.leaves.append(tagged)
        elif not cached:
            self._set(outputs[0], tagged.values())
        else:
            tagged = self._persist(tagged)
            for ix, pcoll in enumerate(outputs):
                self._tagged_outputs[pcoll] = (tagged, ix)
                self._set(pcoll, self._read_cached(tagged, {ix}), cached=True)

    def _read_cached(self, tagged, tags: set[int]):
        """The elements of a cached stage's outputs `tags`, its partitions'
        metrics added to the accumulator as they are read."""
        return tagged.mapPartitions(
            functools.partial(_tagged_values, frozenset(tags), self.accumulator)
        )

    def _side_input_entries(self, plan: StagePlan) -> list[tuple[bytes, bytes]]:
        entries = []
        for side in plan.side_inputs:
            entries.extend(
                side_inputs.state_entries(
                    side,
                    self.windowed_coder(side.pcollection),
                    self._on_driver[side.pcollection],
                )
            )
        return entries

    def _side_input_broadcast(self, plan: StagePlan):
        if not plan.side_inputs:
            return None
        broadcast = self._sc.broadcast(self._side_input_entries(plan))
        self._broadcasts.append(broadcast)
        return broadcast


def _with_tag(ix: int, data: bytes) -> tuple[int, bytes]:
    return ix, data


def _tagged_values(
    tags: frozenset[int], accumulator: Any, records: Iterable[tuple[int, Any]]
) -> Iterator[Any]:
    for tag, value in records:
        if tag in tags:
            yield value
        elif tag == META:
            accumulator.add(value)


def _discard(_record) -> None:
    """Spark action body: the stages' side effects are the point."""


def _stage_partition(plan, side_bc, bundle_bytes, accumulator, partition, inputs):
    entries = side_bc.value if side_bc is not None else ()
    outputs = run_partition(plan, entries, inputs, bundle_bytes, accumulator)
    if accumulator is not None:
        return outputs
    return _named_metrics(plan.label, partition, outputs)


def _named_metrics(stage: str, partition: int, outputs):
    """A cached partition's records, its metrics named by stage and
    partition, so that its readers add them once."""
    for tag, value in outputs:
        if tag == META:
            value = CachedPartitionMetrics(stage, partition, value)
        yield tag, value

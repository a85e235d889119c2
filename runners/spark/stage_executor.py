"""Runs one fused stage over one Spark partition with Beam's SDK harness.

The harness is Beam's SdkWorker in process, with control, data and state
planes in memory (:class:`InProcessHarness`). The partition's encoded
elements are cut into bundles; each bundle's outputs are yielded as
``(output index, encoded chunk)``. A stateful stage then fires its timers in
rounds until none is due, self-checkpointing splittable DoFns are resumed
until they finish, and the task's user metrics go to the job's accumulator.
"""

from __future__ import annotations

import itertools
import threading
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import (
    data_plane,
    sdk_worker,
    statecache,
    statesampler,
)

from runners.spark.components import context_from_bytes
from runners.spark.errors import StageFailure
from runners.spark.metrics import MetricsSnapshot
from runners.spark.plan import INPUT_ID, StagePlan
from runners.spark.state_store import TimerStore, iter_round, state_servicer
from runners.spark.watermark import BatchWatermark

# A looping timer that never stops would spin for ever; batch gives up here.
MAX_TIMER_ROUNDS = 1_000_000


class UntimedStateSampler(statesampler.StateSampler):
    """Beam's state sampler without its sampling thread.

    The SDK starts a thread per bundle to sample which transform is running,
    and joins it when the bundle ends, waiting out its current sleep. That
    costs a few milliseconds per bundle, and a stateful stage runs one
    bundle per timer round: hundreds per task. What the thread measures is
    per-transform execution time, which this runner does not report.
    """

    def start(self) -> None:
        self.tracked_thread = threading.current_thread()
        statesampler.set_current_tracker(self)
        self.started = True

    def stop(self) -> None:
        statesampler.set_current_tracker(None)
        self.finished = True


class _ProcessorCache(sdk_worker.BundleProcessorCache):
    """Hands out bundle processors whose state sampler runs no thread."""

    def get(self, instruction_id: str, bundle_descriptor_id: str) -> Any:
        processor = super().get(instruction_id, bundle_descriptor_id)
        # The sampler's operations hold it by reference, so its class is
        # changed in place (same layout: both are Python subclasses of the
        # SDK's compiled sampler).
        processor.state_sampler.__class__ = UntimedStateSampler
        return processor


class InProcessHarness:
    """Beam's SdkWorker with in-memory control, data and state planes.

    Like Beam's ``EmbeddedWorkerHandler``, except that the SDK's state cache
    is off: it weighs every cached value with objsize, which walks all loaded
    modules and cost milliseconds per state write here, far more than
    reading Beam's in-memory state servicer again. (Side inputs are still
    cached per bundle by the SDK's side-input maps.) Nor does its state
    sampler run a thread (``UntimedStateSampler``).
    """

    def __init__(
        self, descriptor: beam_fn_api_pb2.ProcessBundleDescriptor, servicer: Any
    ) -> None:
        self.data_conn = data_plane.InMemoryDataChannel()
        state = sdk_worker.GlobalCachingStateHandler(statecache.StateCache(0), servicer)
        self._processors = _ProcessorCache(
            worker_handlers.FNAPI_RUNNER_CAPABILITIES,
            worker_handlers.SingletonStateHandlerFactory(state),
            data_plane.InMemoryDataChannelFactory(self.data_conn.inverse()),
            {descriptor.id: descriptor},
        )
        self._worker = sdk_worker.SdkWorker(self._processors)

    def execute(
        self, request: beam_fn_api_pb2.InstructionRequest
    ) -> beam_fn_api_pb2.InstructionResponse:
        """Runs one control instruction synchronously."""
        return self._worker.do_instruction(request)

    def close(self) -> None:
        """Tears the DoFns down."""
        self._processors.shutdown()


def _bundles(inputs: Iterable[bytes], bundle_bytes: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for data in inputs:
        batch.append(data)
        size += len(data)
        if size >= bundle_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class StageExecutor:
    """One fused stage over one partition (batch)."""

    def __init__(
        self,
        plan: StagePlan,
        components: bytes,
        side_input_entries: Iterable[tuple[bytes, bytes]] = (),
        bundle_bytes: int = 8 << 20,
    ) -> None:
        self._plan = plan
        self._bundle_bytes = bundle_bytes
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(plan.descriptor)
        self._harness = InProcessHarness(descriptor, state_servicer(side_input_entries))
        self._timers = TimerStore(
            plan.timer_families, context_from_bytes(components), plan.all_due_timers
        )
        self._watermark = BatchWatermark()
        self._ids = itertools.count()
        self.metrics = MetricsSnapshot()

    def run(self, inputs: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
        """Processes the partition's encoded elements; yields tagged outputs."""
        try:
            for batch in _bundles(inputs, self._bundle_bytes):
                yield from self._process(batch, {})
            self._watermark.input_exhausted()
            for _ in range(MAX_TIMER_ROUNDS):
                due = self._timers.pop_round(self._watermark.current())
                if not due:
                    return
                yield from self._process([], due)
            raise RuntimeError(
                f"{self._plan.label}: timers still set after {MAX_TIMER_ROUNDS} "
                "rounds; does a looping timer lack a stop condition?"
            )
        finally:
            self._harness.close()

    def _process(self, data: list[bytes], timers: dict) -> Iterator[tuple[int, bytes]]:
        while True:
            residuals = yield from self._run_bundle(data, timers)
            if not residuals:
                return
            # A splittable DoFn checkpointed itself; resume it. Batch ignores
            # the requested resume delay.
            data, timers = residuals, {}

    def _run_bundle(self, data: list[bytes], timers: dict) -> Any:
        instruction_id = f"{self._plan.label}-{next(self._ids)}"
        conn = self._harness.data_conn
        to_sdk = conn.output_stream(instruction_id, INPUT_ID)
        for chunk in data:
            to_sdk.write(chunk)
        to_sdk.close()
        for transform_id, family_id, chunk in iter_round(timers):
            stream = conn.output_timer_stream(instruction_id, transform_id, family_id)
            stream.write(chunk)
            stream.close()
        request = beam_fn_api_pb2.InstructionRequest(
            instruction_id=instruction_id,
            process_bundle=beam_fn_api_pb2.ProcessBundleRequest(
                process_bundle_descriptor_id=self._plan.descriptor_id
            ),
        )
        try:
            response = self._harness.execute(request)
        except Exception:  # noqa: BLE001 - user code may raise anything
            # The in-process harness raises instead of answering with an error.
            raise StageFailure(self._plan.label, traceback.format_exc()) from None
        outputs = list(conn.input_elements(instruction_id, []))
        if response.error:
            raise StageFailure(self._plan.label, response.error)
        for element in outputs:
            if isinstance(element, beam_fn_api_pb2.Elements.Timers):
                self._timers.add_encoded(
                    element.transform_id, element.timer_family_id, element.timers
                )
            elif element.data:
                yield self._plan.output_index[element.transform_id], element.data
        result = response.process_bundle
        self.metrics.add_monitoring_infos(result.monitoring_infos)
        if result.requires_finalization:
            self._finalize(instruction_id)
        return [r.application.element for r in result.residual_roots]

    def _finalize(self, instruction_id: str) -> None:
        # Best effort, as in Beam's FnApiRunner: right after the bundle, before
        # Spark has committed the task's output.
        request = beam_fn_api_pb2.InstructionRequest(
            instruction_id=f"{instruction_id}-finalize",
            finalize_bundle=beam_fn_api_pb2.FinalizeBundleRequest(
                instruction_id=instruction_id
            ),
        )
        response = self._harness.execute(request)
        if response.error:
            raise StageFailure(self._plan.label, response.error)


def run_partition(
    plan: StagePlan,
    components: bytes,
    side_input_entries: Iterable[tuple[bytes, bytes]],
    inputs: Iterable[bytes],
    bundle_bytes: int,
    metrics_accumulator: Any,
) -> Iterator[tuple[int, bytes]]:
    """Spark ``mapPartitions`` body: run the stage, then report metrics."""
    executor = StageExecutor(plan, components, side_input_entries, bundle_bytes)
    yield from executor.run(inputs)
    if executor.metrics:
        metrics_accumulator.add(executor.metrics)

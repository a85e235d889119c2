"""Runs one fused stage over one Spark partition with Beam's SDK harness.

The harness is Beam's SdkWorker in process, with control, data and state
planes in memory (:class:`InProcessHarness`). The partition's encoded
elements are cut into bundles; each bundle's outputs are yielded as
``(output index, encoded chunk)``. A stateful stage then fires its timers in
timer bundles until none is due, self-checkpointing splittable DoFns are
resumed until they finish, and the task's user metrics go to the job's
accumulator.

Timers never cross the data plane. The SDK encodes the timers a DoFn sets
with its family's coder and decodes the runner's timer elements with it; the
executor puts a :class:`_TimerPort` in that coder's place. Sets and clears
then reach the task's ``TimerStore`` as they happen, and a timer
bundle fires due timers inside the SDK one callback at a time, each after
the previous callback's changes (Beam's Java SDK harness gives the same
guarantee; Beam's Python FnApiRunner fires a whole round of due timers, so a
timer cleared by an earlier callback of the round still fires there).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import (
    data_plane,
    sdk_worker,
    statecache,
    statesampler,
)

from runners.spark.errors import StageFailure, quiet_beam_reraise_logs
from runners.spark.keyed import decode_with_bytes
from runners.spark.metrics import MetricsSnapshot
from runners.spark.plan import INPUT_ID, SDF_PROCESS_URN, StagePlan
from runners.spark.state_store import InMemoryStageState, StageState, TimerStore
from runners.spark.watermark import BatchTime, StageTime

# A timer bundle fires at most this many timers: the bundle's outputs are
# held in memory until it ends.
TIMERS_PER_BUNDLE = 10_000
# A looping timer that never stops would spin for ever; batch gives up here.
MAX_TIMER_BUNDLES = 100_000
# The runner's timer element of a timer bundle: its content is never read,
# but the in-memory data plane drops empty elements.
_FIRE = b"\x01"
# How often a bundle of a splittable DoFn is asked for its output count when
# the time policy caps its records.
_PROGRESS_POLL_S = 0.02
# A split with nothing kept of the remainder: the current element's
# restriction is checkpointed, and the elements after it are not read.
_SPLIT_AT_CURRENT_ELEMENT = beam_fn_api_pb2.ProcessBundleSplitRequest.DesiredSplit(
    fraction_of_remainder=0.0
)

# The tag of a record for the driver in a stage's output (its outputs are
# tagged 0, 1, ...): the task's metrics, and in a micro-batch what the
# driver must learn to commit it.
META = -1


class UntimedStateSampler(statesampler.StateSampler):
    """Beam's state sampler without its sampling thread.

    The SDK starts a thread per bundle to sample which transform is running,
    and joins it when the bundle ends, waiting out its current sleep. That
    costs a few milliseconds per bundle, and a task runs a bundle per
    input chunk and per 10,000 fired timers, and every small stage (side
    inputs, sinks) at least one. What the thread measures is per-transform
    execution time, which this runner does not report.
    """

    def start(self) -> None:
        self.tracked_thread = threading.current_thread()
        statesampler.set_current_tracker(self)
        self.started = True

    def stop(self) -> None:
        statesampler.set_current_tracker(None)
        self.finished = True


class _ProcessorCache(sdk_worker.BundleProcessorCache):
    """Hands out bundle processors whose state sampler runs no thread,
    each passed to ``prepare`` before use."""

    def __init__(self, *args: Any, prepare: Callable[[Any], None]) -> None:
        super().__init__(*args)
        self._prepare = prepare

    def get(self, instruction_id: str, bundle_descriptor_id: str) -> Any:
        processor = super().get(instruction_id, bundle_descriptor_id)
        # The sampler's operations hold it by reference, so its class is
        # changed in place (same layout: both are Python subclasses of the
        # SDK's compiled sampler).
        processor.state_sampler.__class__ = UntimedStateSampler
        self._prepare(processor)
        return processor


class _TimerPort:
    """Takes the place of the SDK's timer coder for one timer family.

    The SDK encodes with it each timer a DoFn sets or clears, and decodes
    with it the runner's timer elements. Here a set or clear goes straight
    to the task's :class:`TimerStore`, unencoded, and the runner's one
    timer element of a timer bundle runs ``fire`` inside the bundle.
    """

    def __init__(
        self,
        transform_id: str,
        family_id: str,
        coder: Any,
        timers: TimerStore,
        fire: Callable[[], None],
    ) -> None:
        # The SDK's own timer coder, which the next task's port needs too.
        self.coder = coder
        self._transform_id = transform_id
        self._family_id = family_id
        self._timers = timers
        self._fire = fire

    def encode_to_stream(self, timer: Any, unused_stream: Any, nested: bool) -> None:
        """A DoFn set or cleared ``timer``."""
        self._timers.record(self._transform_id, self._family_id, timer)

    def decode_all(self, unused_data: bytes) -> Iterator[Any]:
        """The runner's timer element: fire due timers now."""
        self._fire()
        return iter(())


class _BoundServicer:
    """The state servicer of the task a reused harness is running now."""

    def __init__(self) -> None:
        self.target: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class InProcessHarness:
    """Beam's SdkWorker with in-memory control, data and state planes.

    Like Beam's ``EmbeddedWorkerHandler``, except that the SDK's state cache
    is off: it weighs every cached value with objsize, which walks all loaded
    modules and cost milliseconds per state write here, far more than
    reading Beam's in-memory state servicer again. (Side inputs are still
    cached per bundle by the SDK's side-input maps.) Nor does its state
    sampler run a thread (``UntimedStateSampler``).

    A harness outlives its task: Spark reuses a Python worker for the next
    task, and building a stage's bundle processor (its DoFns, their
    signatures) costs tens of milliseconds, several times per micro-batch.
    So :func:`harness_for` keeps the harnesses of recent stages per process,
    and each task binds to it its state servicer and the ``prepare`` every
    bundle processor goes through before it runs a bundle.
    """

    def __init__(self, descriptor: beam_fn_api_pb2.ProcessBundleDescriptor) -> None:
        self.descriptor = descriptor
        self.data_conn = data_plane.InMemoryDataChannel()
        self._servicer = _BoundServicer()
        self._prepare: Callable[[Any], None] = lambda _processor: None
        state = sdk_worker.GlobalCachingStateHandler(
            statecache.StateCache(0), self._servicer
        )
        self._processors = _ProcessorCache(
            worker_handlers.FNAPI_RUNNER_CAPABILITIES,
            worker_handlers.SingletonStateHandlerFactory(state),
            data_plane.InMemoryDataChannelFactory(self.data_conn.inverse()),
            {descriptor.id: descriptor},
            prepare=lambda processor: self._prepare(processor),
        )
        self._worker = sdk_worker.SdkWorker(self._processors)

    def bind(self, servicer: Any, prepare: Callable[[Any], None]) -> None:
        """Makes the harness serve one task."""
        self._servicer.target = servicer
        self._prepare = prepare

    def execute(
        self, request: beam_fn_api_pb2.InstructionRequest
    ) -> beam_fn_api_pb2.InstructionResponse:
        """Runs one control instruction synchronously."""
        return self._worker.do_instruction(request)

    def output_count(self, instruction_id: str, pcollections: set[str]) -> int:
        """Elements a running bundle has output to ``pcollections`` so far
        (0 once it has ended). Safe from another thread."""
        response = self._worker.do_instruction(
            beam_fn_api_pb2.InstructionRequest(
                instruction_id=f"{instruction_id}-progress",
                process_bundle_progress=beam_fn_api_pb2.ProcessBundleProgressRequest(
                    instruction_id=instruction_id
                ),
            )
        )
        return sum(
            monitoring_infos.extract_counter_value(info)
            for info in response.process_bundle_progress.monitoring_infos
            if info.urn == monitoring_infos.ELEMENT_COUNT_URN
            and info.labels.get(monitoring_infos.PCOLLECTION_LABEL) in pcollections
        )

    def checkpoint(
        self, instruction_id: str
    ) -> beam_fn_api_pb2.ProcessBundleSplitResponse:
        """Asks a running bundle to stop after its current element, and its
        splittable DoFn to checkpoint that element's restriction."""
        response = self._worker.do_instruction(
            beam_fn_api_pb2.InstructionRequest(
                instruction_id=f"{instruction_id}-split",
                process_bundle_split=beam_fn_api_pb2.ProcessBundleSplitRequest(
                    instruction_id=instruction_id,
                    desired_splits={INPUT_ID: _SPLIT_AT_CURRENT_ELEMENT},
                ),
            )
        )
        return response.process_bundle_split

    def close(self) -> None:
        """Tears the DoFns down."""
        self._processors.shutdown()


class _RecordCap:
    """Watches one bundle of a splittable DoFn from a second thread and
    checkpoints it once it has output ``limit`` elements, as Beam's runners
    bound a splittable DoFn's work per bundle (by outputs and by time)."""

    def __init__(
        self,
        harness: InProcessHarness,
        instruction_id: str,
        outputs: set[str],
        limit: int,
    ) -> None:
        self._harness = harness
        self._instruction_id = instruction_id
        self._outputs = outputs
        self._limit = limit
        self._done = threading.Event()
        self.split: beam_fn_api_pb2.ProcessBundleSplitResponse | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(_PROGRESS_POLL_S):
            count = self._harness.output_count(self._instruction_id, self._outputs)
            if count < self._limit:
                continue
            try:
                self.split = self._harness.checkpoint(self._instruction_id)
                return
            except ValueError:
                # Beam sizes the split from an estimate of the bytes output,
                # which is NaN while the elements are counted but none has
                # been sized yet (`ConsumerSet.total_output_bytes`): the
                # request fails before it changes the bundle, so ask again.
                continue

    def stop(self) -> beam_fn_api_pb2.ProcessBundleSplitResponse | None:
        """Ends the watch (the bundle has ended); the split it made, if any."""
        self._done.set()
        self._thread.join()
        return self.split


@dataclass
class _BundleEnd:
    """What a bundle leaves to the task: residual roots for the time policy,
    and input elements a split left unprocessed."""

    residuals: list[Any] = field(default_factory=list)
    unprocessed: list[bytes] = field(default_factory=list)


# Harnesses kept per Python worker process, most recently used last.
_HARNESSES: collections.OrderedDict[str, InProcessHarness] = collections.OrderedDict()
# Stages whose harness a worker keeps; the least recently used goes first.
_KEPT_HARNESSES = 16
# Instruction ids are unique per process: a reused harness's SDK worker has
# seen those of earlier tasks.
_INSTRUCTION_IDS = itertools.count()


def harness_for(
    plan: StagePlan, side_input_entries: list[tuple[bytes, bytes]]
) -> InProcessHarness:
    """This process's harness for ``plan``'s stage, built on first use.

    Keyed by the descriptor's content, not its id: another pipeline in the
    same worker may have a stage of the same name. And by the stage's side
    inputs: the SDK reads a globally windowed side input once, when it
    builds a DoFn's invoker, so a harness kept from another job (the same
    stage over other data) would go on serving that job's value."""
    digest = hashlib.sha1(plan.descriptor)
    for key_bytes, data in side_input_entries:
        digest.update(len(key_bytes).to_bytes(8, "big") + key_bytes)
        digest.update(len(data).to_bytes(8, "big") + data)
    key = digest.hexdigest()
    harness = _HARNESSES.pop(key, None)
    if harness is None:
        # A step's failure reaches the driver as a StageFailure; Beam's own
        # log of it would print the traceback on the job's stderr first.
        quiet_beam_reraise_logs()
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(plan.descriptor)
        harness = InProcessHarness(descriptor)
    _HARNESSES[key] = harness
    while len(_HARNESSES) > _KEPT_HARNESSES:
        _, evicted = _HARNESSES.popitem(last=False)
        evicted.close()
    return harness


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
    """One fused stage over one partition.

    ``state`` holds user state, side inputs and timers (batch: in memory for
    the task); ``time`` decides when timers are due and what becomes of a
    splittable DoFn's deferred remainder (batch: all due once the input is
    consumed; remainders resumed at once).
    """

    def __init__(
        self,
        plan: StagePlan,
        side_input_entries: Iterable[tuple[bytes, bytes]] = (),
        bundle_bytes: int = 8 << 20,
        state: StageState | None = None,
        time: StageTime | None = None,
    ) -> None:
        self._plan = plan
        self._bundle_bytes = bundle_bytes
        side_input_entries = list(side_input_entries)
        self.state = state or InMemoryStageState(
            side_input_entries, plan.timer_families
        )
        self._timers = self.state.timers
        self._harness = harness_for(plan, side_input_entries)
        # Parsed once per process with the harness, not once per task.
        descriptor = self._harness.descriptor
        self._harness.bind(self.state.servicer, self._route_timers)
        self.time = time or BatchTime()
        self.metrics = MetricsSnapshot()
        # The record cap counts what a splittable DoFn emits (its elements
        # are restrictions that can be checkpointed part way).
        self._capped_outputs = {
            pcoll
            for t in descriptor.transforms.values()
            if t.spec.urn == SDF_PROCESS_URN
            for pcoll in t.outputs.values()
        }
        self._descriptor = descriptor

    def run(self, inputs: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
        """Processes the partition's encoded elements; yields tagged outputs."""
        try:
            for batch in _bundles(inputs, self._bundle_bytes):
                yield from self._process(batch, fire_timers=False)
            self.time.input_exhausted()
            for _ in range(MAX_TIMER_BUNDLES):
                if not self._timers.has_due(
                    self.time.event_horizon(), self.time.processing_horizon()
                ):
                    return
                yield from self._process([], fire_timers=True)
            raise RuntimeError(
                f"{self._plan.label}: timers still due after "
                f"{MAX_TIMER_BUNDLES * TIMERS_PER_BUNDLE:,} firings; does a "
                "looping timer lack a stop condition?"
            )
        finally:
            # The harness stays for the stage's next task in this process.
            self._harness.bind(None, lambda _processor: None)

    def _route_timers(self, processor: Any) -> None:
        fire = functools.partial(self._fire_due, processor.ops)
        for (transform_id, family_id), info in processor.timers_info.items():
            coder = info.timer_coder_impl
            if isinstance(coder, _TimerPort):
                # A processor reused from an earlier bundle or task.
                coder = coder.coder
            self._timers.bind_coder(transform_id, family_id, coder)
            info.timer_coder_impl = _TimerPort(
                transform_id, family_id, coder, self._timers, fire
            )

    def _fire_due(self, ops: dict[str, Any]) -> None:
        # One callback at a time: the store sees what each callback set or
        # cleared before it hands out the next timer.
        event_horizon = self.time.event_horizon()
        processing_horizon = self.time.processing_horizon()
        for _ in range(TIMERS_PER_BUNDLE):
            due = self._timers.pop_due(event_horizon, processing_horizon)
            if due is None:
                return
            transform_id, family_id, timer = due
            ops[transform_id].process_timer(family_id, timer)

    def _process(self, data: list[bytes], fire_timers: bool) -> Iterator:
        while True:
            end = yield from self._run_bundle(data, fire_timers)
            # A splittable DoFn checkpointed (by itself, or at the record
            # cap): the time policy says whether to resume it here or leave
            # it to a later batch. Input elements a split left unprocessed
            # are still this task's.
            data = end.unprocessed + self.time.resume_now(end.residuals)
            fire_timers = False
            if not data:
                return

    def _run_bundle(self, data: list[bytes], fire_timers: bool) -> Any:
        instruction_id = f"{self._plan.label}-{next(_INSTRUCTION_IDS)}"
        conn = self._harness.data_conn
        to_sdk = conn.output_stream(instruction_id, INPUT_ID)
        for chunk in data:
            to_sdk.write(chunk)
        to_sdk.close()
        if fire_timers:
            family = self._plan.timer_families[0]
            stream = conn.output_timer_stream(
                instruction_id, family.transform_id, family.family_id
            )
            stream.write(_FIRE)
            stream.close()
        request = beam_fn_api_pb2.InstructionRequest(
            instruction_id=instruction_id,
            process_bundle=beam_fn_api_pb2.ProcessBundleRequest(
                process_bundle_descriptor_id=self._plan.descriptor_id
            ),
        )
        cap = self.time.record_cap() if self._capped_outputs else None
        watch = (
            _RecordCap(self._harness, instruction_id, self._capped_outputs, cap)
            if cap
            else None
        )
        try:
            response = self._harness.execute(request)
        except Exception:  # noqa: BLE001 - user code may raise anything
            # The in-process harness raises instead of answering with an error.
            raise StageFailure(self._plan.label, traceback.format_exc()) from None
        finally:
            split = watch.stop() if watch else None
        outputs = list(conn.input_elements(instruction_id, []))
        if response.error:
            raise StageFailure(self._plan.label, response.error)
        for element in outputs:
            if element.data:
                yield self._plan.output_index[element.transform_id], element.data
        result = response.process_bundle
        self.metrics.add_monitoring_infos(result.monitoring_infos)
        if result.requires_finalization:
            self._finalize(instruction_id)
        end = _BundleEnd(list(result.residual_roots))
        if split is not None:
            end.residuals.extend(split.residual_roots)
            for channel in split.channel_splits:
                end.unprocessed = self._elements_from(
                    data, channel.first_residual_element
                )
        return end

    def _elements_from(self, chunks: list[bytes], first: int) -> list[bytes]:
        """The encoded input elements of ``chunks`` from index ``first`` on."""
        context = pipeline_context.PipelineContext(self._descriptor)
        impl = context.coders[self._plan.input_coder_id].get_impl()
        elements = (
            raw for chunk in chunks for _, raw in decode_with_bytes(chunk, impl)
        )
        return list(itertools.islice(elements, first, None))

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
    side_input_entries: Iterable[tuple[bytes, bytes]],
    inputs: Iterable[bytes],
    bundle_bytes: int,
    metrics_accumulator: Any | None,
) -> Iterator[tuple[int, Any]]:
    """Spark ``mapPartitions`` body: run the stage, then report metrics, to
    ``metrics_accumulator`` or, without one, as a last record tagged
    ``META`` (for a partition that is cached: see `RddTranslator._stage`)."""
    executor = StageExecutor(plan, side_input_entries, bundle_bytes)
    yield from executor.run(inputs)
    if not executor.metrics:
        return
    if metrics_accumulator is None:
        yield META, executor.metrics
    else:
        metrics_accumulator.add(executor.metrics)

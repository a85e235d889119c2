"""``SparkRunner``: Beam's portable pipeline executed as PySpark RDD lineage.

The pipeline is optimised by Beam's own phases (fusion, combiner lifting,
SDF expansion), translated stage by stage into RDDs, and run as one Spark job
(plus a job per round of side inputs, which the driver collects). In batch
the call is synchronous: the returned result is already DONE, with user
metrics merged through a Spark accumulator, or collected with the cached
partitions of the stages that computed them. Progress goes to the log
(``progress.py``). A streaming pipeline (``--streaming``, or any unbounded
PCollection) runs as micro-batches in a background thread
(``streaming_job.py``), and ``run()`` returns the running job's result.
"""

from __future__ import annotations

import logging
import time

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import runner
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.transforms import environments

from runners.spark.drain_plan import drain_phases
from runners.spark.driver_stages import EXECUTABLE_STAGE, IMPULSE
from runners.spark.errors import driver_lost, from_spark_exception, job_aborted
from runners.spark.metrics import MetricsSnapshot, SparkMetrics
from runners.spark.options import SparkOptions, check_options
from runners.spark.progress import ProgressLog
from runners.spark.session import ensure_python_env, get_or_create_session
from runners.spark.streaming_job import StreamingJob, StreamingSettings
from runners.spark.streaming_result import StreamingPipelineResult
from runners.spark.test_stream_source import TEST_STREAM_URN, carry_scripted_windows
from runners.spark.translation import KNOWN_URNS, RddTranslator

_LOGGER = logging.getLogger(__name__)

_SUPPORTED_REQUIREMENTS = frozenset(
    [
        common_urns.requirements.REQUIRES_STATEFUL_PROCESSING.urn,
        common_urns.requirements.REQUIRES_SPLITTABLE_DOFN.urn,
        common_urns.requirements.REQUIRES_BUNDLE_FINALIZATION.urn,
    ]
)


class SparkPipelineResult(runner.PipelineResult):
    """Result of a finished run: its state and its committed user metrics."""

    def __init__(self, state: str, snapshot: MetricsSnapshot) -> None:
        super().__init__(state)
        self._snapshot = snapshot
        self._metrics = SparkMetrics(snapshot)

    def wait_until_finish(self, duration=None) -> str:
        return self._state

    def metrics(self) -> SparkMetrics:
        return self._metrics

    def monitoring_infos(self) -> list:
        """User metrics as MonitoringInfos, as Beam's job service reports them."""
        return self._snapshot.monitoring_infos()


class SparkRunner(runner.PipelineRunner):
    """Runs Beam pipelines on PySpark; see ``docs/spark-runner.md``.

    ``is_drain``: a streaming pipeline drains from its first batch, as with
    Beam's ``FnApiRunner(is_drain=True)``: every splittable DoFn's
    restriction goes through its ``truncate_restriction`` before it is
    read, TestStreams jump to their end, and the job ends once what is left
    is read. (A running job drains with ``result.drain()``.)
    """

    def __init__(self, is_drain: bool = False) -> None:
        super().__init__()
        self._is_drain = is_drain

    def default_environment(self, options: PipelineOptions) -> environments.Environment:
        # The SDK harness runs embedded in Spark's Python workers.
        return environments.EmbeddedPythonEnvironment.default()

    def run_portable_pipeline(
        self, pipeline: beam_runner_api_pb2.Pipeline, options: PipelineOptions
    ) -> SparkPipelineResult:
        """Optimises, translates and runs ``pipeline``; blocks until done."""
        ensure_python_env()
        check_options(options)
        self._check_requirements(pipeline)
        streaming = is_streaming(pipeline, options)
        spark_options = options.view_as(SparkOptions)
        session = get_or_create_session(spark_options)
        sc = session.sparkContext
        if streaming:
            return self._run_streaming(pipeline, sc, spark_options)
        optimized = optimize(pipeline, streaming)
        translator = RddTranslator(optimized, sc, spark_options)
        started = time.monotonic()
        try:
            try:
                with ProgressLog(sc, float(spark_options.spark_progress_seconds)):
                    translator.translate()
                    metrics = translator.finish()
            finally:
                # A call to the JVM: if it has died, this raises too, and the
                # handler below sees that error, the first one in its chain.
                translator.unpersist()
        except Exception as exc:
            error = from_spark_exception(exc)
            if error is not None:
                raise error from None
            incomplete = "the job's outputs are incomplete"
            lost = driver_lost(sc, exc, incomplete) or job_aborted(exc, incomplete)
            if lost is not None:
                raise lost from exc
            raise
        _LOGGER.info(
            "SparkRunner: done in %.1f s: %d fused stages on %s, %d of them "
            "on the driver",
            time.monotonic() - started,
            translator.stages,
            sc.master,
            translator.stages_on_driver,
        )
        return SparkPipelineResult(runner.PipelineState.DONE, metrics)

    def _run_streaming(self, pipeline, sc, spark_options) -> StreamingPipelineResult:
        settings = StreamingSettings(
            checkpoint_dir=spark_options.checkpoint_dir,
            key_groups=int(spark_options.streaming_key_groups),
            batch_interval=float(spark_options.streaming_batch_interval_seconds),
            idle_timeout=float(spark_options.streaming_idle_timeout_seconds),
            max_records=int(spark_options.streaming_max_records_per_batch) or None,
            start_drained=self._is_drain,
            progress_seconds=float(spark_options.spark_progress_seconds),
        )
        if settings.key_groups < 1:
            raise ValueError("--streaming_key_groups must be at least 1")
        if spark_options.streaming_max_records_per_batch < 0:
            raise ValueError("--streaming_max_records_per_batch must be 0 or more")
        _LOGGER.info("SparkRunner: streaming on %s", sc.master)
        carry_scripted_windows(pipeline)
        # Optimising rewrites the proto it is given: each plan from a copy.
        plan, drain_plan = (
            optimize(_copied(pipeline), streaming=True, is_drain=draining)
            for draining in (False, True)
        )
        return StreamingPipelineResult(
            StreamingJob(plan, drain_plan, sc, spark_options, settings)
        )

    @staticmethod
    def _check_requirements(pipeline: beam_runner_api_pb2.Pipeline) -> None:
        for requirement in pipeline.requirements:
            if requirement not in _SUPPORTED_REQUIREMENTS:
                raise ValueError(f"SparkRunner cannot satisfy {requirement}")
        _refuse_other_roots(pipeline)


# What a pipeline may start from here: every other source is expanded by
# the SDK into an Impulse and a splittable DoFn.
_ROOTS = frozenset({IMPULSE, TEST_STREAM_URN})


def _refuse_other_roots(pipeline: beam_runner_api_pb2.Pipeline) -> None:
    """Raises `NotImplementedError` naming a primitive with no input other
    than Impulse and TestStream (a runner-native source such as Pub/Sub's,
    a Flatten of nothing): Beam's fusion fails on it with "not enough values
    to unpack", which names neither the transform nor what it is."""
    for transform in pipeline.components.transforms.values():
        if transform.subtransforms or transform.inputs:
            continue
        if transform.spec.urn not in _ROOTS:
            raise NotImplementedError(
                f"SparkRunner cannot run {transform.unique_name!r} "
                f"({transform.spec.urn or 'no URN'}): a pipeline here starts "
                "from Impulse (Create, the file and splittable sources) or "
                "TestStream"
            )


def is_streaming(pipeline: beam_runner_api_pb2.Pipeline, options: PipelineOptions):
    """Beam's own signals: ``--streaming``, or any unbounded PCollection."""
    if options.view_as(StandardOptions).streaming:
        return True
    unbounded = beam_runner_api_pb2.IsBounded.UNBOUNDED
    return any(
        pc.is_bounded == unbounded for pc in pipeline.components.pcollections.values()
    )


def optimize(
    pipeline: beam_runner_api_pb2.Pipeline,
    streaming: bool = False,
    is_drain: bool = False,
) -> beam_runner_api_pb2.Pipeline:
    """Beam's own phases (fusion, combiner lifting, SDF expansion) down to
    fused stages and the primitives this runner translates. Streaming leaves
    out combiner packing, as Beam's portable runners do: it is a batch
    optimisation, and Beam's suites expect no packed step in streaming.
    ``is_drain`` gives the plan a draining job runs (``drain_plan.py``)."""
    phases = translations.standard_optimize_phases()
    if streaming:
        phases.remove(translations.pack_combiners)
    if is_drain:
        phases = drain_phases(phases)
    optimized = translations.optimize_pipeline(
        pipeline,
        phases=phases,
        known_runner_urns=KNOWN_URNS | {TEST_STREAM_URN},
        partial=False,
        is_drain=is_drain,
    )
    # A streaming job finds its state, remainders and checkpoint by stage
    # name, so a name must depend on the pipeline alone. Beam's has a
    # process-wide counter in it, and its transform id lists the fused steps
    # in the order fusion merged them, which follows set iteration and so
    # differs from one process to the next: each stage is named by its
    # input and its steps' names, sorted.
    transforms = optimized.components.transforms
    for transform_id in optimized.root_transform_ids:
        stage = transforms[transform_id]
        if stage.spec.urn == EXECUTABLE_STAGE:
            payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(
                stage.spec.payload
            )
            steps = payload.components.transforms
            stage.unique_name = (
                payload.input
                + ":"
                + "+".join(
                    sorted(steps[step].unique_name for step in payload.transforms)
                )
            )
    return optimized


def _copied(pipeline: beam_runner_api_pb2.Pipeline) -> beam_runner_api_pb2.Pipeline:
    copy = beam_runner_api_pb2.Pipeline()
    copy.CopyFrom(pipeline)
    return copy

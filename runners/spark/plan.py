"""Driver-side description of one fused stage, shipped to the executors.

A :class:`StagePlan` holds what an executor needs to run the stage through
Beam's SDK harness: a ``ProcessBundleDescriptor`` whose transforms are keyed by
their unique names (so metrics, errors and side-input requests name the
user's transforms), one data input, one data output per external PCollection,
and the timer families and side inputs the stage uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apache_beam.portability import common_urns
from apache_beam.portability.api import (
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    endpoints_pb2,
)
from apache_beam.runners.worker import bundle_processor
from apache_beam.utils import proto_utils

INPUT_ID = "spark_input"
# The transform that runs a splittable DoFn over its restrictions.
SDF_PROCESS_URN = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn


@dataclass(frozen=True)
class TimerFamily:
    """One timer family of one ParDo in the stage."""

    transform_id: str
    family_id: str
    time_domain: int


@dataclass(frozen=True)
class SideInput:
    """A side input the stage reads through the state API."""

    transform_id: str
    tag: str
    pcollection: str
    access_pattern: str
    # A side PCollection windowed with a trigger of its own is ready for a
    # window as soon as it holds data for it (its first pane); it needs its
    # window mapping (a serialised FunctionSpec) and window coder for that.
    triggered: bool = False
    window_mapping: bytes = b""
    window_coder_id: str = ""


@dataclass
class StagePlan:
    """Everything an executor needs to run one fused stage over a partition."""

    label: str
    descriptor: bytes
    descriptor_id: str
    input_pcollection: str
    input_coder_id: str
    outputs: list[str]
    output_index: dict[str, int]
    timer_families: list[TimerFamily] = field(default_factory=list)
    side_inputs: list[SideInput] = field(default_factory=list)
    key_coder_id: str | None = None

    @property
    def stateful(self) -> bool:
        """Whether elements must be partitioned by key before this stage."""
        return self.key_coder_id is not None


def _data_port(coder_id: str) -> bytes:
    return beam_fn_api_pb2.RemoteGrpcPort(coder_id=coder_id).SerializeToString()


def build_stage_plan(
    label: str,
    transform: beam_runner_api_pb2.PTransform,
    components: beam_runner_api_pb2.Components,
    windowed_coders: dict[str, str],
    keyed: bool,
) -> StagePlan:
    """Builds the plan of an ``beam:runner:executable_stage:v1`` transform.

    ``components`` are the whole optimised pipeline's (with windowed coders
    added); ``keyed`` says the stage holds user state or timers, so its input
    is a KV whose key decides the Spark partition.
    """
    stage = beam_runner_api_pb2.ExecutableStagePayload.FromString(
        transform.spec.payload
    )
    inner = stage.components.transforms
    names = {tid: inner[tid].unique_name for tid in stage.transforms}
    transforms = {names[tid]: inner[tid] for tid in stage.transforms}
    transforms[INPUT_ID] = beam_runner_api_pb2.PTransform(
        unique_name=INPUT_ID,
        spec=beam_runner_api_pb2.FunctionSpec(
            urn=bundle_processor.DATA_INPUT_URN,
            payload=_data_port(windowed_coders[stage.input]),
        ),
        outputs={"out": stage.input},
    )
    output_index: dict[str, int] = {}
    for ix, pcoll in enumerate(stage.outputs):
        out_id = f"spark_output_{ix}"
        transforms[out_id] = beam_runner_api_pb2.PTransform(
            unique_name=out_id,
            spec=beam_runner_api_pb2.FunctionSpec(
                urn=bundle_processor.DATA_OUTPUT_URN,
                payload=_data_port(windowed_coders[pcoll]),
            ),
            inputs={"in": pcoll},
        )
        output_index[out_id] = ix

    timer_families = []
    for timer in stage.timers:
        payload = proto_utils.parse_Bytes(
            inner[timer.transform_id].spec.payload, beam_runner_api_pb2.ParDoPayload
        )
        spec = payload.timer_family_specs[timer.local_name]
        timer_families.append(
            TimerFamily(
                names[timer.transform_id],
                timer.local_name,
                spec.time_domain,
            )
        )
    side_inputs = []
    for side in stage.side_inputs:
        consumer = inner[side.transform_id]
        payload = proto_utils.parse_Bytes(
            consumer.spec.payload, beam_runner_api_pb2.ParDoPayload
        )
        spec = payload.side_inputs[side.local_name]
        pcoll = consumer.inputs[side.local_name]
        strategy = components.windowing_strategies[
            components.pcollections[pcoll].windowing_strategy_id
        ]
        side_inputs.append(
            SideInput(
                names[side.transform_id],
                side.local_name,
                pcoll,
                spec.access_pattern.urn,
                triggered=not strategy.trigger.HasField("default"),
                window_mapping=spec.window_mapping_fn.SerializeToString(),
                window_coder_id=strategy.window_coder_id,
            )
        )

    key_coder_id = None
    if keyed:
        kv_coder = components.coders[components.pcollections[stage.input].coder_id]
        key_coder_id = kv_coder.component_coder_ids[0]

    descriptor_id = f"spark_stage_{label}"
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor(
        id=descriptor_id,
        transforms=transforms,
        # The stage's own components know its internal PCollections; the
        # pipeline's coders include the windowed coders of the data ports.
        pcollections=dict(stage.components.pcollections.items()),
        coders=dict(components.coders.items()),
        windowing_strategies=dict(stage.components.windowing_strategies.items()),
        environments=dict(components.environments.items()),
        # Timers travel on the in-memory data channel; any URL selects it.
        timer_api_service_descriptor=endpoints_pb2.ApiServiceDescriptor(
            url="in-memory"
        ),
    )
    return StagePlan(
        label=label,
        descriptor=descriptor.SerializeToString(),
        descriptor_id=descriptor_id,
        input_pcollection=stage.input,
        input_coder_id=windowed_coders[stage.input],
        outputs=list(stage.outputs),
        output_index=output_index,
        timer_families=timer_families,
        side_inputs=side_inputs,
        key_coder_id=key_coder_id,
    )

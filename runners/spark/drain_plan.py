"""The plan a streaming job runs while it drains.

Beam's drain runs every splittable DoFn's restriction through the DoFn's
``truncate_restriction`` before it is processed: Beam's default keeps a
bounded restriction whole and drops an unbounded one; a DoFn may keep part
of either. Beam's SDF expansion in drain mode (``is_drain``) puts a
``TruncateAndSizeRestriction`` step before each ``Process``, and fusion
puts the two in one stage.

This runner resumes a deferred remainder by feeding it to its stage's
input, so a remainder of that fused stage would be truncated again each
time it is resumed, and a truncation is not idempotent (Beam's own test
halves the range). Beam's runners hand a remainder straight to ``Process``.
:func:`separate_truncation` does the same here: a Reshuffle between the
two steps makes ``Process`` the first step of its stage, so the drain
plan's ``Process`` stage resumes its own remainders untruncated, and the
truncation stage, which reads what the ``Process`` stage read before the
drain, takes the remainders left from before the drain exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations

from runners.spark.driver_stages import EXECUTABLE_STAGE
from runners.spark.plan import SDF_PROCESS_URN as PROCESS_URN
from runners.spark.translation import RESHUFFLE

TRUNCATE_URN = common_urns.sdf_components.TRUNCATE_SIZED_RESTRICTION.urn


def separate_truncation(
    stages: Iterable[translations.Stage], context: translations.TransformContext
) -> Iterator[translations.Stage]:
    """Optimisation phase, after ``expand_sdf`` and before fusion: a
    Reshuffle between each truncation step and the ``Process`` it feeds."""
    stages = list(stages)
    rewired: dict[str, str] = {}
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn == TRUNCATE_URN:
                (truncated,) = transform.outputs.values()
                reshuffled = _copy_pcollection(context, truncated, "_reshuffled")
                rewired[truncated] = reshuffled
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn != PROCESS_URN:
                continue
            for tag, pcoll in transform.inputs.items():
                if pcoll in rewired:
                    transform.inputs[tag] = rewired[pcoll]
        yield stage
        for transform in stage.transforms:
            if transform.spec.urn == TRUNCATE_URN:
                (truncated,) = transform.outputs.values()
                yield _reshuffle_stage(
                    stage, context, transform, truncated, rewired[truncated]
                )


def _copy_pcollection(
    context: translations.TransformContext, pcoll_id: str, suffix: str
) -> str:
    pcollections = context.components.pcollections
    new_id = translations.unique_name(pcollections, pcoll_id + suffix)
    pcollections[new_id].CopyFrom(pcollections[pcoll_id])
    return new_id


def _reshuffle_stage(
    stage: translations.Stage,
    context: translations.TransformContext,
    truncate: beam_runner_api_pb2.PTransform,
    source: str,
    target: str,
) -> translations.Stage:
    transforms = context.components.transforms
    name = truncate.unique_name + "/Reshuffle"
    transform_id = translations.unique_name(transforms, name)
    transforms[transform_id].CopyFrom(
        beam_runner_api_pb2.PTransform(
            unique_name=name,
            spec=beam_runner_api_pb2.FunctionSpec(urn=RESHUFFLE),
            inputs={"in": source},
            outputs={"out": target},
        )
    )
    return translations.Stage(
        name,
        [transforms[transform_id]],
        stage.downstream_side_inputs,
        stage.must_follow,
        parent=stage.name,
    )


def drain_phases(phases: list) -> list:
    """``phases`` with :func:`separate_truncation` right after SDF expansion."""
    at = phases.index(translations.expand_sdf) + 1
    return [*phases[:at], separate_truncation, *phases[at:]]


def truncation_targets(
    plan: Iterable[beam_runner_api_pb2.PTransform],
    drain_plan: Iterable[beam_runner_api_pb2.PTransform],
) -> dict[str, str]:
    """Each stage of ``plan`` that processes a splittable DoFn -> the stage
    of ``drain_plan`` that truncates that DoFn's restrictions: where the
    remainders it deferred before the drain go."""
    processing = _stages_running(plan, PROCESS_URN, "/Process")
    truncating = _stages_running(
        drain_plan, TRUNCATE_URN, "/TruncateAndSizeRestriction"
    )
    return {
        stage: truncating[dofn]
        for dofn, stage in processing.items()
        if dofn in truncating
    }


def _stages_running(
    primitives: Iterable[beam_runner_api_pb2.PTransform], urn: str, suffix: str
) -> dict[str, str]:
    """Splittable DoFn (its transform's name) -> the fused stage running its
    step ``urn`` (named ``<DoFn's name><suffix>`` by Beam's expansion)."""
    stages = {}
    for proto in primitives:
        if proto.spec.urn != EXECUTABLE_STAGE:
            continue
        payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(
            proto.spec.payload
        )
        for transform_id in payload.transforms:
            step = payload.components.transforms[transform_id]
            if step.spec.urn == urn:
                stages[step.unique_name.removesuffix(suffix)] = proto.unique_name
    return stages

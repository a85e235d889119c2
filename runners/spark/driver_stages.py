"""Small fused stages that the driver runs itself, without a Spark job.

Beam's sinks and global combines end in stages rooted at an Impulse that
work on a handful of elements: ``WriteToText`` initialises, pre-finalises
and finalises its files in three of them, each reading the others' results
as side inputs, and ``CombineGlobally`` computes its default value in one.
On Spark each costs a job of its own (a side-input collect, or the final
action), with its scheduling and a Python worker, for milliseconds of work
on data the driver already holds.

A stage runs on the driver when everything it reads is on the driver and
everything it produces stays there:

- its main input is an Impulse's output or another driver stage's output;
- it holds no user state or timers;
- each of its outputs is read only as a side input (which the driver
  collects anyway) or as the main input of another driver stage.

So no PCollection reaches the driver that it would not hold anyway, and
work that Spark would run as one task is run as one call.
"""

from __future__ import annotations

from collections.abc import Iterable

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

IMPULSE = common_urns.primitives.IMPULSE.urn
EXECUTABLE_STAGE = common_urns.executable_stage


def side_pcollections(proto: beam_runner_api_pb2.PTransform) -> list[str]:
    """The PCollections an executable stage reads as side inputs."""
    if proto.spec.urn != EXECUTABLE_STAGE:
        return []
    payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(proto.spec.payload)
    transforms = payload.components.transforms
    return [
        transforms[side.transform_id].inputs[side.local_name]
        for side in payload.side_inputs
    ]


def main_inputs(proto: beam_runner_api_pb2.PTransform) -> set[str]:
    """The PCollections a primitive reads element by element."""
    return set(proto.inputs.values()) - set(side_pcollections(proto))


def _stateless_stage(proto: beam_runner_api_pb2.PTransform) -> bool:
    if proto.spec.urn != EXECUTABLE_STAGE:
        return False
    payload = beam_runner_api_pb2.ExecutableStagePayload.FromString(proto.spec.payload)
    return not (payload.user_states or payload.timers)


def driver_stages(primitives: Iterable[beam_runner_api_pb2.PTransform]) -> set[str]:
    """Unique names of the executable stages the driver runs (see above)."""
    primitives = list(primitives)
    reads = {proto.unique_name: main_inputs(proto) for proto in primitives}
    readers: dict[str, list[str]] = {}
    for name, pcolls in reads.items():
        for pcoll in pcolls:
            readers.setdefault(pcoll, []).append(name)
    impulses = {
        pcoll
        for proto in primitives
        if proto.spec.urn == IMPULSE
        for pcoll in proto.outputs.values()
    }
    chosen = {p.unique_name: p for p in primitives if _stateless_stage(p)}
    # Start from every stateless stage and drop those that read or feed
    # anything off the driver, until no more drop: what remains is the
    # largest set that satisfies the rules on its own.
    while True:
        local = impulses | {pc for p in chosen.values() for pc in p.outputs.values()}
        dropped = [
            name
            for name, proto in chosen.items()
            if not reads[name] <= local
            or any(
                reader not in chosen
                for pcoll in proto.outputs.values()
                for reader in readers.get(pcoll, ())
            )
        ]
        if not dropped:
            return set(chosen)
        for name in dropped:
            del chosen[name]

"""``PhotonJoin``: query and click streams in, each click joined exactly once.

The flow of the Photon paper, as Beam steps:

1. ``ValidateQueries`` / ``ValidateClicks``: events without the ids or the
   event time the join needs go to ``dead_letters``.
2. ``StoreQueries``: every valid query is written to the event store.
3. ``Join``: the tagged union of both streams, keyed by a shard of the
   query id, through the ``Joiner`` (state per query id: query, pending
   clicks, seen click ids; timers: ``max_wait`` deadlines and a TTL GC).
   Clicks whose query never comes go to ``unjoinable``.
4. ``Register``: each candidate must win its click id in the id registry
   under this pipeline's token before it is output as ``joined``; a click
   another pipeline holds is ``wasted``; one older than the registry's GC
   horizon is ``unjoinable``.

Inputs must carry their event time as element timestamp: the watermark
drives the deadlines and the GC. Every drop is counted in the
``millwheel.photon`` namespace.
"""

from __future__ import annotations

import apache_beam as beam

from transforms.millwheel.event_time import require_global_window
from transforms.millwheel.state_params import apply_with_state_params
from transforms.millwheel.typed_params import require_kinds
from transforms.photon.event_store import WriteToEventStore
from transforms.photon.joiner import UNJOINABLE, Joiner, shard_of
from transforms.photon.params import BigtableTarget, JoinParams, RegistryParams
from transforms.photon.registration import WASTED, RegisterJoins, check_token
from transforms.photon.validation import DEAD_LETTERS, ValidateEvents
from transforms.records import coders as _coders  # noqa: F401  registers coders
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.photon_pb2 import (
    ClickEvent,
    JoinedClick,
    JoinerEvent,
    QueryEvent,
    UnjoinableClick,
)

JOINED = "joined"
OUTPUTS = (JOINED, UNJOINABLE, WASTED, DEAD_LETTERS)


def _keyed_query(query: QueryEvent, shards: int) -> tuple[int, JoinerEvent]:
    return shard_of(query.query_id, shards), JoinerEvent(query=query)


def _keyed_click(click: ClickEvent, shards: int) -> tuple[int, JoinerEvent]:
    return shard_of(click.query_id, shards), JoinerEvent(click=click)


class PhotonJoin(beam.PTransform):
    """``(queries, clicks) | PhotonJoin(...)`` -> dict of PCollections.

    Keys of the result (see ``OUTPUTS``): ``joined`` (``JoinedClick``, each
    click id at most once across all pipelines sharing the registry),
    ``unjoinable`` (``UnjoinableClick`` with its reason), ``wasted``
    (``JoinedClick``s another pipeline registered first) and
    ``dead_letters`` (``DeadLetter``).

    ``token`` identifies this pipeline in the id registry: redundant
    pipelines need distinct tokens, a replay of the same pipeline the same.
    """

    def __init__(
        self,
        target: BigtableTarget,
        token: str,
        join: JoinParams = JoinParams(),
        registry: RegistryParams = RegistryParams(),
    ) -> None:
        super().__init__()
        require_kinds(
            "PhotonJoin",
            ("target", target, BigtableTarget),
            ("join", join, JoinParams),
            ("registry", registry, RegistryParams),
        )
        check_token(token)
        self._target = target
        self._token = token
        self._join = join
        self._registry = registry

    def expand(
        self, inputs: tuple[beam.PCollection, beam.PCollection]
    ) -> dict[str, beam.PCollection]:
        queries, clicks = _query_and_click_streams(inputs)
        for stream in (queries, clicks):
            require_global_window(stream, "PhotonJoin", _OWN_STATE)
        valid_queries = queries | "ValidateQueries" >> _validate(QueryEvent)
        valid_clicks = clicks | "ValidateClicks" >> _validate(ClickEvent)
        _ = valid_queries.valid | "StoreQueries" >> beam.ParDo(
            WriteToEventStore(self._target, self._registry.max_batch)
        )
        shards = self._join.shards
        keyed = (
            valid_queries.valid
            | "KeyQueries"
            >> beam.Map(_keyed_query, shards).with_output_types(
                tuple[int, JoinerEvent]
            ),
            valid_clicks.valid
            | "KeyClicks"
            >> beam.Map(_keyed_click, shards).with_output_types(
                tuple[int, JoinerEvent]
            ),
        ) | "Union" >> beam.Flatten()
        # A shard's state holds the query ids `shard_of` sent it, and its
        # timers are tagged by slot: under another shard count or slot a
        # restarted job would join a click its old shard had seen.
        joined = apply_with_state_params(
            keyed,
            "Join",
            beam.ParDo(Joiner(self._target, self._join))
            .with_output_types(JoinedClick, **{UNJOINABLE: UnjoinableClick})
            .with_outputs(UNJOINABLE, main="candidates"),
            {"shards": shards, "timer_slot_ms": self._join.timer_slot_ms},
        )
        # A batch replayed after a crash registers its clicks again: under
        # another token they would be another pipeline's, and never output.
        registered = apply_with_state_params(
            joined.candidates,
            "Register",
            beam.ParDo(RegisterJoins(self._target, self._token, self._registry))
            .with_output_types(
                JoinedClick, **{UNJOINABLE: UnjoinableClick, WASTED: JoinedClick}
            )
            .with_outputs(UNJOINABLE, WASTED, main=JOINED),
            {"pipeline_token": self._token},
        )
        return {
            JOINED: registered[JOINED],
            UNJOINABLE: (joined[UNJOINABLE], registered[UNJOINABLE])
            | "MergeUnjoinable" >> beam.Flatten(),
            WASTED: registered[WASTED],
            DEAD_LETTERS: (valid_queries[DEAD_LETTERS], valid_clicks[DEAD_LETTERS])
            | "MergeDeadLetters" >> beam.Flatten(),
        }


# Why the streams must come unwindowed (`require_global_window`).
_OWN_STATE = (
    "its joiner keeps each query's clicks, and the ids of those already "
    "joined, per window, so a click seen in two windows would be joined twice"
)


def _query_and_click_streams(inputs) -> tuple[beam.PCollection, beam.PCollection]:
    if not (
        isinstance(inputs, tuple)
        and len(inputs) == 2
        and all(isinstance(i, beam.PCollection) for i in inputs)
    ):
        raise TypeError(
            "PhotonJoin takes a pair (queries, clicks) of PCollections: "
            f"(queries, clicks) | PhotonJoin(...), got {inputs!r}"
        )
    return inputs


def _validate(record_type: type) -> beam.PTransform:
    return (
        beam.ParDo(ValidateEvents(record_type))
        .with_output_types(record_type, **{DEAD_LETTERS: DeadLetter})
        .with_outputs(DEAD_LETTERS, main="valid")
    )

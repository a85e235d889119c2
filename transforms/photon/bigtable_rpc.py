"""Pipelined ``CheckAndMutateRow`` calls: many conditional writes in flight.

Bigtable has no batch form of ``CheckAndMutateRow``: the condition is atomic
on one row only, and ``MutateRows`` (the batch write) takes no condition. So
a batch of conditional inserts is sent as concurrent unary calls on one gRPC
channel, up to ``max_in_flight`` at a time. The calls are made on the raw
channel with the protobuf messages of the Bigtable API rather than through
``google-cloud-bigtable``'s ``Table.check_and_mutate_row``: that method
blocks until its answer, and its per-call overhead (request wrappers,
operation metrics) costs more than the RPC itself against a nearby server.

Each request is idempotent for its caller (see ``id_registry``), so a call
that fails with a transient status is simply sent again, under the policy of
``bigtable_retry``.
"""

from __future__ import annotations

import os
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import grpc
from google.cloud.bigtable_v2.types import bigtable as _bigtable
from google.cloud.bigtable_v2.types import data as _data

from transforms.photon.bigtable_retry import call_with_retries

_CheckAndMutateRequest = _bigtable.CheckAndMutateRowRequest.pb()
_CheckAndMutateResponse = _bigtable.CheckAndMutateRowResponse.pb()
RowFilterPb = _data.RowFilter.pb()
MutationPb = _data.Mutation.pb()

_METHOD = "/google.bigtable.v2.Bigtable/CheckAndMutateRow"
_ENDPOINT = "bigtable.googleapis.com:443"
_SCOPES = ("https://www.googleapis.com/auth/bigtable.data",)


def open_channel() -> grpc.Channel:
    """A channel to ``$BIGTABLE_EMULATOR_HOST`` if set, else to Bigtable with
    application-default credentials."""
    emulator = os.environ.get("BIGTABLE_EMULATOR_HOST")
    if emulator:
        return grpc.insecure_channel(emulator)
    from google.api_core import grpc_helpers

    return grpc_helpers.create_channel(_ENDPOINT, scopes=_SCOPES)


@dataclass(frozen=True)
class ConditionalWrite:
    """One ``CheckAndMutateRow``: mutations applied if ``predicate`` matches
    the row (``if_true``) or not (``if_false``)."""

    row_key: bytes
    predicate: object  # a RowFilterPb
    if_true: Sequence[object] = ()  # MutationPb
    if_false: Sequence[object] = ()


class PipelinedCheckAndMutate:
    """Sends ``ConditionalWrite``s to one table with many calls in flight."""

    def __init__(
        self,
        channel: grpc.Channel,
        table_name: str,
        *,
        app_profile_id: str = "",
        max_in_flight: int = 128,
        deadline_s: float = 60.0,
    ) -> None:
        self._call = channel.unary_unary(
            _METHOD,
            request_serializer=_CheckAndMutateRequest.SerializeToString,
            response_deserializer=_CheckAndMutateResponse.FromString,
        )
        self._table_name = table_name
        self._app_profile_id = app_profile_id
        # Bigtable routes each request to the table's backend by this header.
        params = f"table_name={urllib.parse.quote(table_name, safe='')}"
        if app_profile_id:
            params += f"&app_profile_id={urllib.parse.quote(app_profile_id)}"
        self._metadata = (("x-goog-request-params", params),)
        self._max_in_flight = max_in_flight
        self._deadline_s = deadline_s
        # One attempt may not use up the whole deadline: a reply lost on a
        # dead connection must leave time to resend.
        self._timeout_s = min(30.0, deadline_s / 2)
        self._table_id = table_name.rsplit("/", 1)[-1]

    def run(self, writes: Sequence[ConditionalWrite]) -> list[bool]:
        """``predicate_matched`` of each write, in order; all writes applied.

        Raises ``BigtableUnavailable`` if a write keeps failing with a
        transient status until the deadline, ``TableGone`` if the table does
        not exist, and ``grpc.RpcError`` at once for other errors.
        """
        if len(writes) == 1:
            # Alone, a blocking call: a future's completion hand-off only adds
            # latency when there is nothing to overlap.
            first = partial(self._blocking, writes[0], self._timeout_s)
            return [self._answer(writes[0], first)]
        matched: list[bool] = [False] * len(writes)
        in_flight: deque = deque()
        for i, write in enumerate(writes):
            if len(in_flight) >= self._max_in_flight:
                self._collect(*in_flight.popleft(), writes, matched)
            in_flight.append((i, self._send(write)))
        while in_flight:
            self._collect(*in_flight.popleft(), writes, matched)
        return matched

    def _request(self, write: ConditionalWrite):
        request = _CheckAndMutateRequest(
            table_name=self._table_name,
            row_key=write.row_key,
            predicate_filter=write.predicate,
            true_mutations=list(write.if_true),
            false_mutations=list(write.if_false),
        )
        if self._app_profile_id:
            request.app_profile_id = self._app_profile_id
        return request

    def _send(self, write: ConditionalWrite) -> grpc.Future:
        return self._call.future(
            self._request(write), timeout=self._timeout_s, metadata=self._metadata
        )

    def _blocking(self, write: ConditionalWrite, left_s: float):
        return self._call(
            self._request(write),
            timeout=min(self._timeout_s, left_s),
            metadata=self._metadata,
        )

    def _collect(
        self,
        i: int,
        future: grpc.Future,
        writes: Sequence[ConditionalWrite],
        matched: list[bool],
    ) -> None:
        matched[i] = self._answer(writes[i], future.result)

    def _answer(self, write: ConditionalWrite, first_attempt: Callable) -> bool:
        """The write's ``predicate_matched``, resending it on transient errors."""
        attempts = [first_attempt]

        def attempt(left_s: float) -> bool:
            # The first answer is the pipelined call's; a resend goes alone.
            if attempts:
                return attempts.pop()().predicate_matched
            return self._blocking(write, left_s).predicate_matched

        return call_with_retries(
            self._table_id, "CheckAndMutateRow (register)", attempt, self._deadline_s
        )


def _column(into, family: str, qualifier: bytes) -> None:
    column = into.column_range_filter
    column.family_name = family
    column.start_qualifier_closed = qualifier
    column.end_qualifier_closed = qualifier


def any_column_predicate(family: str, qualifiers: Sequence[bytes]):
    """A ``RowFilterPb`` that matches a row with a cell in any of the (sorted)
    ``qualifiers`` of ``family``: one exact column, or the range they span
    chained with the union (interleave) of the exact columns."""
    predicate = RowFilterPb()
    if len(qualifiers) == 1:
        _column(predicate, family, qualifiers[0])
        return predicate
    span, union = predicate.chain.filters.add(), predicate.chain.filters.add()
    column_range = span.column_range_filter
    column_range.family_name = family
    column_range.start_qualifier_closed = qualifiers[0]
    column_range.end_qualifier_closed = qualifiers[-1]
    for qualifier in qualifiers:
        _column(union.interleave.filters.add(), family, qualifier)
    return predicate


def set_cell(family: str, qualifier: bytes, value: bytes, timestamp_micros: int):
    """A ``MutationPb`` setting one cell."""
    mutation = MutationPb()
    cell = mutation.set_cell
    cell.family_name = family
    cell.column_qualifier = qualifier
    cell.value = value
    cell.timestamp_micros = timestamp_micros
    return mutation

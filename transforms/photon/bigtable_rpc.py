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
that fails with a transient status is simply sent again.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import grpc
from google.cloud.bigtable_v2.types import bigtable as _bigtable
from google.cloud.bigtable_v2.types import data as _data

_CheckAndMutateRequest = _bigtable.CheckAndMutateRowRequest.pb()
_CheckAndMutateResponse = _bigtable.CheckAndMutateRowResponse.pb()
RowFilterPb = _data.RowFilter.pb()
MutationPb = _data.Mutation.pb()

_METHOD = "/google.bigtable.v2.Bigtable/CheckAndMutateRow"
_ENDPOINT = "bigtable.googleapis.com:443"
_SCOPES = ("https://www.googleapis.com/auth/bigtable.data",)
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


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
        timeout_s: float = 30.0,
        max_attempts: int = 5,
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
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts

    def run(self, writes: Sequence[ConditionalWrite]) -> list[bool]:
        """``predicate_matched`` of each write, in order; all writes applied.

        Raises ``grpc.RpcError`` if a write keeps failing (after
        ``max_attempts`` for transient errors, at once for others).
        """
        if len(writes) == 1:
            # Alone, a blocking call: a future's completion hand-off only adds
            # latency when there is nothing to overlap.
            return [self._answer(writes[0], partial(self._blocking, writes[0]))]
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

    def _blocking(self, write: ConditionalWrite):
        return self._call(
            self._request(write), timeout=self._timeout_s, metadata=self._metadata
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
        attempt_call, attempt = first_attempt, 1
        while True:
            try:
                return attempt_call().predicate_matched
            except grpc.RpcError as error:
                if error.code() not in _TRANSIENT or attempt >= self._max_attempts:
                    raise
            # Rare: resend this one alone after a short backoff.
            time.sleep(0.05 * 2**attempt)
            attempt_call, attempt = partial(self._blocking, write), attempt + 1

"""Zeitgeist's long-term state: per-query models in Bigtable, fenced per row.

MillWheel keeps a computation's persistent state in Bigtable so that it
outlives the workers. Here Beam state is the working copy of a query's
`ModelState` and the `models` table is the copy that survives a pipeline
restart: `ModelCalculator` seeds a query's model from it the first time the
query is seen in a run, and persists the model after folding windows in.

Keyed by query: one row per query, whose key is the query behind a short hash
prefix (`deterministic_row_key`), so that queries spread over tablets. The
row holds, in family ``model``: ``state``, the newest serialized
`ModelState`; ``run``, the id of the run that wrote it; ``base``, the model
that run started from (empty if none). Family ``seq`` holds the sequencer
token cell (see `transforms.millwheel.sequencer`). A writer acquires the
row's token before it reads the model it will continue from, so a previous
owner's late write is refused rather than silently lost, and commits every
save under that token: a writer whose token was superseded (another run
took the query over) gets `StaleSequencerToken` and writes nothing.

Why ``run`` and ``base``: a bundle writes the model before the runner
commits the bundle, so a bundle that fails after its write leaves in the
table a model that already holds the bundle's windows. Its retry, seeding
from that, would take the windows for already folded and emit nothing for
them. So `load` returns, for a row written by this same run, the model the
run started from: the retry folds the same windows into the same model and
writes the same result.

The table keeps the newest model only (latest-only GC), until it is deleted;
nothing here expires models of queries that went quiet.
"""

from __future__ import annotations

from google.cloud.bigtable.data import (
    DeleteRangeFromColumn,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from transforms.millwheel.bigtable_clients import data_client
from transforms.millwheel.bigtable_tables import (
    MODELS_FAMILY,
    ensure_table,
    models_table,
)
from transforms.millwheel.productions import deterministic_row_key
from transforms.millwheel.sequencer import FencedTable, SequencerToken
from transforms.records.zeitgeist_pb2 import ModelState
from transforms.zeitgeist.params import ModelStoreConfig

STATE_COLUMN = b"state"
BASE_COLUMN = b"base"
RUN_COLUMN = b"run"


def model_row_key(query: str) -> bytes:
    """The `models` row of `query`: a hash prefix, then the query."""
    return deterministic_row_key(query)


def encode_model(state: ModelState) -> bytes:
    """The value of a model cell."""
    return state.SerializeToString(deterministic=True)


def decode_model(value: bytes) -> ModelState:
    """The `ModelState` held in a model cell."""
    return ModelState.FromString(value)


class ModelStore:
    """Loads and saves per-query models in the `models` table for one run.

    Opens a data client: create it in `DoFn.setup` (it does not pickle) and
    `close` it in `teardown`. Creates the table with its column families on
    first use. One instance may be shared by the threads of a worker.
    """

    def __init__(self, config: ModelStoreConfig) -> None:
        ensure_table(config.project, config.instance, models_table(config.table))
        self._run = config.run_id.encode()
        self._client = data_client(config.project)
        self._table = self._client.get_table(config.instance, config.table)
        self._fenced = FencedTable(self._table)

    def close(self) -> None:
        self._client.close()

    def acquire(self, query: str) -> SequencerToken:
        """Take `query`'s row over; every earlier writer's token is superseded.

        Acquire before `load`, so that the previous owner cannot change the
        model after it was read.
        """
        return self._fenced.acquire(model_row_key(query))

    def load(self, query: str) -> ModelState | None:
        """The model this run continues `query` from, or None if there is none.

        That is the stored model if another run wrote it, and the model this
        run started from if this run did (a retried bundle; see the module
        docstring).
        """
        row = self._table.read_row(model_row_key(query), row_filter=_model_cells())
        if row is None:
            return None
        cells = {cell.qualifier: cell.value for cell in row.get_cells(MODELS_FAMILY)}
        mine = cells.get(RUN_COLUMN) == self._run
        value = cells.get(BASE_COLUMN if mine else STATE_COLUMN, b"")
        model = decode_model(value)
        return model if model.history else None

    def save(
        self,
        query: str,
        state: ModelState,
        token: SequencerToken,
        *,
        base: ModelState | None = None,
    ) -> None:
        """Replace `query`'s stored model with `state`, iff `token` still holds.

        Pass `base`, the model the run started from (an empty `ModelState`
        if none), with the run's first save of `query`. Raises
        `StaleSequencerToken`, having written nothing, if a newer token was
        acquired for the row. Saving the same state again is idempotent: the
        cells' timestamp is the model's last window start, not the clock.
        """
        timestamp_micros = max(state.last_window_start, 0) * 1000
        cells = {STATE_COLUMN: encode_model(state), RUN_COLUMN: self._run}
        if base is not None:
            cells[BASE_COLUMN] = encode_model(base)
        mutations = []
        for column, value in cells.items():
            # Delete before set keeps one version whatever the timestamps, so
            # a model saved for earlier windows (a backfill) still replaces it.
            mutations.append(DeleteRangeFromColumn(MODELS_FAMILY, column))
            mutations.append(SetCell(MODELS_FAMILY, column, value, timestamp_micros))
        self._fenced.commit(model_row_key(query), token, mutations)


def _model_cells() -> rf.RowFilter:
    return rf.RowFilterChain(
        [rf.FamilyNameRegexFilter(MODELS_FAMILY), rf.CellsColumnLimitFilter(1)]
    )

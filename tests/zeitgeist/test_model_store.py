"""Zeitgeist's models in Bigtable: persisted, seeded on restart, fenced.

Runs against the Bigtable emulator. Expected values come from a run without
the store over the whole stream, from `forecast` applied by hand, or from
the table read back with a plain data client, never from the store itself.
"""

import contextlib
import json
import logging

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.execution import MetricsContainer
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.metrics.metricbase import MetricName
from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory
from google.cloud.bigtable.data import ReadRowsQuery

from pipelines import config as config_loader
from pipelines import zeitgeist as cli
from pipelines.outputs import read_output
from tests.zeitgeist.streaming import MINUTE, T0, window_index
from transforms.millwheel.bigtable_tables import MODELS_FAMILY
from transforms.millwheel.event_time import to_timestamp
from transforms.millwheel.sequencer import StaleSequencerToken
from transforms.records.readers import WriteJsonLines
from transforms.records.zeitgeist_pb2 import (
    ModelState,
    SearchQuery,
    WindowCount,
    WindowScore,
)
from transforms.zeitgeist import forecast
from transforms.zeitgeist.composite import SCORES, Zeitgeist
from transforms.zeitgeist.model_calculator import METRICS_NAMESPACE, ModelCalculator
from transforms.zeitgeist.model_store import ModelStore, ModelStoreConfig
from transforms.zeitgeist.params import ModelParams, WindowParams

pytestmark = pytest.mark.bigtable

WINDOW = WindowParams(size_ms=MINUTE, activity_horizon_windows=2)
MODEL = ModelParams()
QUERIES = ("cats", "dogs")
FIRST_HALF = range(0, 20)
SECOND_HALF = range(20, 40)


def count(query: str, w: int) -> int:
    # Every window has searches, so a run over part of the stream sees the
    # same windows as a run over all of it: no zero-count windows differ.
    return 100 + (w * 37 + len(query) * 11) % 29


def searches(windows: range) -> list[SearchQuery]:
    return [
        SearchQuery(query=q, event_time=T0 + w * MINUTE + 10, count=count(q, w))
        for w in windows
        for q in QUERIES
    ]


def run_zeitgeist(records, output, store=None):
    """Scores by (query, window index), and the pipeline result."""
    pipeline = beam.Pipeline()
    outputs = (
        pipeline
        | beam.Create(records)
        | beam.Map(
            lambda s: beam.window.TimestampedValue(s, to_timestamp(s.event_time))
        )
        | Zeitgeist(WINDOW, MODEL, model_store=store)
    )
    outputs[SCORES] | WriteJsonLines(str(output / "scores"))
    result = pipeline.run()
    result.wait_until_finish()
    scores = read_output(output, "scores", WindowScore)
    return {(s.query, window_index(s.window_start)): s for s in scores}, result


def counter(result, name: str) -> int:
    found = result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name(name)
    )["counters"]
    return sum(c.committed for c in found)


def stored_models(bigtable_instance) -> dict[bytes, ModelState]:
    """Every row's model cell, decoded with a plain data client."""
    rows = bigtable_instance.table("models").read_rows(ReadRowsQuery())
    return {
        row.row_key: ModelState.FromString(
            row.get_cells(MODELS_FAMILY, b"state")[0].value
        )
        for row in rows
    }


def config(bigtable_instance, run_id: str) -> ModelStoreConfig:
    return ModelStoreConfig(
        bigtable_instance.project, bigtable_instance.instance_id, run_id=run_id
    )


def by_query(models: dict[bytes, ModelState]) -> dict[str, ModelState]:
    # Row keys are "<hash>#<query>"; the queries here need no unescaping.
    return {key.split(b"#", 1)[1].decode(): model for key, model in models.items()}


def test_model_row_round_trips_model_state(bigtable_instance):
    state = ModelState(
        level=123.25,
        level_spread=1.5,
        level_error=2.0,
        history=300,
        last_window_start=T0,
        season_roots=[0.5, float("nan"), 1.5],
        season_offset=-0.5,
        excursion=-3,
        excursion_sum=-12.0,
    )
    writer = ModelStore(config(bigtable_instance, "writer"))
    reader = ModelStore(config(bigtable_instance, "reader"))
    try:
        assert reader.load("cats") is None
        writer.save("cats", state, writer.acquire("cats"), base=ModelState())
        assert by_query(stored_models(bigtable_instance)) == {"cats": state}
        assert reader.load("cats") == state
    finally:
        writer.close()
        reader.close()


def test_a_run_persists_its_models(bigtable_instance, tmp_path):
    _, result = run_zeitgeist(
        searches(FIRST_HALF), tmp_path, config(bigtable_instance, "run-1")
    )
    models = by_query(stored_models(bigtable_instance))
    assert set(models) == set(QUERIES)
    for query, model in models.items():
        # Folded by hand: the stored model is the fold of every window.
        expected = ModelState()
        for w in FIRST_HALF:
            forecast.fold(expected, MODEL, T0 + w * MINUTE, MINUTE, count(query, w))
        assert model == expected
    assert counter(result, "models_saved") >= len(QUERIES)
    assert counter(result, "models_seeded") == 0
    assert counter(result, "model_writes_fenced") == 0


def test_a_second_run_continues_from_the_stored_models(bigtable_instance, tmp_path):
    run_zeitgeist(
        searches(FIRST_HALF), tmp_path / "first", config(bigtable_instance, "run-1")
    )
    after_first = by_query(stored_models(bigtable_instance))
    second, result = run_zeitgeist(
        searches(SECOND_HALF), tmp_path / "second", config(bigtable_instance, "run-2")
    )
    whole, _ = run_zeitgeist(searches(range(0, 40)), tmp_path / "whole")

    assert counter(result, "models_seeded") == len(QUERIES)
    for query in QUERIES:
        first = second[(query, SECOND_HALF[0])]
        predicted = forecast.predict(
            after_first[query], MODEL, T0 + SECOND_HALF[0] * MINUTE, MINUTE
        )
        assert first.expected == predicted.expected
        assert first.stddev == predicted.stddev
    assert {k for k in second} == {(q, w) for q in QUERIES for w in SECOND_HALF}
    for key, score in second.items():
        assert (score.expected, score.stddev) == (
            whole[key].expected,
            whole[key].stddev,
        ), key


def test_an_overlapping_run_does_not_fold_windows_twice(bigtable_instance, tmp_path):
    run_zeitgeist(
        searches(FIRST_HALF), tmp_path / "first", config(bigtable_instance, "run-1")
    )
    overlap = range(10, 40)
    second, result = run_zeitgeist(
        searches(overlap), tmp_path / "second", config(bigtable_instance, "run-2")
    )
    whole, _ = run_zeitgeist(searches(range(0, 40)), tmp_path / "whole")

    assert counter(result, "windows_already_in_model") == 10 * len(QUERIES)
    # Each stored model is loaded once: before, once per window skipped.
    assert counter(result, "models_seeded") == len(QUERIES)
    for query, model in by_query(stored_models(bigtable_instance)).items():
        assert model == _folded(query, range(0, 40))[0], query
    # The detector still gets a chain it can follow: every later window.
    assert set(second) == {(q, w) for q in QUERIES for w in SECOND_HALF}
    for key, score in second.items():
        assert (score.expected, score.stddev) == (
            whole[key].expected,
            whole[key].stddev,
        )


def test_a_stale_writer_cannot_overwrite_a_model(bigtable_instance):
    old = ModelStore(config(bigtable_instance, "old-run"))
    new = ModelStore(config(bigtable_instance, "new-run"))
    try:
        old_token = old.acquire("cats")
        old.save("cats", ModelState(level=1.0, history=1), old_token)
        new_token = new.acquire("cats")
        assert new.load("cats") == ModelState(level=1.0, history=1)
        new.save("cats", ModelState(level=2.0, history=2), new_token)
        with pytest.raises(StaleSequencerToken):
            old.save("cats", ModelState(level=3.0, history=3), old_token)
    finally:
        old.close()
        new.close()
    assert by_query(stored_models(bigtable_instance)) == {
        "cats": ModelState(level=2.0, history=2)
    }


class _Bag:
    def __init__(self):
        self.items = []

    def read(self):
        return list(self.items)

    def add(self, item):
        self.items.append(item)

    def clear(self):
        self.items = []


class _Value:
    def __init__(self):
        self.value = None

    def read(self):
        return self.value

    def write(self, value):
        self.value = value

    def clear(self):
        self.value = None


class _Attempt:
    """One bundle of `ModelCalculator` outside a runner, with its own state.

    Fresh state stands for a run (or a retry) whose state holds nothing yet.
    In-memory state cells stand in for a runner's here, against the real
    Bigtable emulator, because what is tested is an interleaving no runner
    can be made to produce on demand: a zombie attempt's bundle resuming
    after a newer attempt of the same query has acquired the model, or a
    retried bundle meeting its own earlier acquisition. The DoFn's methods
    run as a runner calls them, and the store's fencing is the real one.
    """

    def __init__(self, store: ModelStoreConfig):
        self.dofn = ModelCalculator(MODEL, MINUTE, 0, store)
        self.dofn.setup()
        self.state = {
            name: _Bag() if name == "pending" else _Value()
            for name in ("pending", "model", "recent", "token", "skipped")
        }
        self.metrics = MetricsContainer("ModelCalculator")
        # Like the WindowCounter, link each window to the one before it in
        # this run; a run's first window has no link.
        self.last_window: int | None = None

    def bundle(self, query: str, windows: range) -> list:
        """Process `windows` of `query` in one bundle; the updates emitted."""
        updates = []
        with self._metrics():
            self.dofn.start_bundle()
            for w in windows:
                element = (query, _window(query, w, self.last_window))
                self.last_window = w
                updates.extend(u for _, u in self.dofn.process(element, **self.state))
            self.dofn.finish_bundle()
        return updates

    def counter(self, name: str) -> int:
        return self.metrics.get_counter(
            MetricName(METRICS_NAMESPACE, name)
        ).get_cumulative()

    def close(self):
        self.dofn.teardown()

    @contextlib.contextmanager
    def _metrics(self):
        sampler = statesampler.StateSampler("test", CounterFactory())
        statesampler.set_current_tracker(sampler)
        try:
            with sampler.scoped_state(
                "ModelCalculator", "process", metrics_container=self.metrics
            ):
                yield
        finally:
            statesampler.set_current_tracker(None)


def _window(query: str, w: int, previous: int | None) -> WindowCount:
    window = WindowCount(
        query=query,
        window_start=T0 + w * MINUTE,
        window_end=T0 + (w + 1) * MINUTE,
        count=count(query, w),
    )
    if previous is not None:
        window.previous_window_start = T0 + previous * MINUTE
    return window


def _folded(query: str, windows: range) -> tuple[ModelState, list[float]]:
    """The model after `windows`, and each window's prediction, by hand."""
    state, expected = ModelState(), []
    for w in windows:
        folded = forecast.fold(state, MODEL, T0 + w * MINUTE, MINUTE, count(query, w))
        expected.append(folded.prediction.expected)
    return state, expected


def test_the_second_runs_acquisition_fences_the_first(bigtable_instance, caplog):
    first = _Attempt(config(bigtable_instance, "run-1"))
    second = _Attempt(config(bigtable_instance, "run-2"))
    try:
        first.bundle("cats", range(0, 10))
        # Run 2 takes over while run 1 is still alive (a zombie).
        second.bundle("cats", range(10, 15))
        with caplog.at_level(logging.WARNING):
            zombie_updates = first.bundle("cats", range(10, 12))
    finally:
        first.close()
        second.close()
    # Run 1 still emits, but its write is dropped, counted and logged.
    assert len(zombie_updates) == 2
    assert first.counter("model_writes_fenced") == 1
    assert "superseded sequencer tokens" in caplog.text
    assert second.counter("models_seeded") == 1
    expected, _ = _folded("cats", range(0, 15))
    assert by_query(stored_models(bigtable_instance)) == {"cats": expected}


def test_a_retried_bundle_does_not_fence_itself_out(bigtable_instance):
    store = config(bigtable_instance, "run-1")
    failed, retry = _Attempt(store), _Attempt(store)
    try:
        # The first attempt writes its models, then dies before the runner
        # commits its state; the retry starts from the same (empty) state.
        failed_updates = failed.bundle("cats", range(0, 10))
        retried_updates = retry.bundle("cats", range(0, 10))
        later_updates = retry.bundle("cats", range(10, 12))
    finally:
        failed.close()
        retry.close()
    expected_model, expected = _folded("cats", range(0, 12))
    # The retry emits every window again, with the same predictions, rather
    # than treating its failed attempt's windows as already folded.
    assert [u.expected for u in retried_updates] == expected[:10]
    assert [u.expected for u in failed_updates] == expected[:10]
    assert [u.expected for u in later_updates] == expected[10:]
    assert retry.counter("windows_already_in_model") == 0
    assert retry.counter("model_writes_fenced") == 0
    assert retry.counter("models_saved") == 2
    assert by_query(stored_models(bigtable_instance)) == {"cats": expected_model}


# Parquet takes the columnar path (`Zeitgeist.on_batches`), which keeps
# `ModelCalculator` when models are stored.
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cli_persists_models_with_model_store_bigtable(
    bigtable_instance, tmp_path, capsys, fmt
):
    rows = [
        {"query": s.query, "event_time": s.event_time, "count": s.count}
        for s in searches(FIRST_HALF)
    ]
    source = tmp_path / f"searches.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), source)
    else:
        source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["--input", str(source), "--output", str(tmp_path / "out")]
    args += ["--window_seconds", "60", "--model_store", "bigtable"]
    args += ["--bigtable_project", bigtable_instance.project]
    args += ["--bigtable_instance", bigtable_instance.instance_id]
    assert cli.run(args) == 0
    assert "models saved to store" in capsys.readouterr().out
    models = by_query(stored_models(bigtable_instance))
    assert {q: m.history for q, m in models.items()} == {q: 20 for q in QUERIES}


def test_cli_model_store_bigtable_needs_project_and_instance(tmp_path):
    args, _ = cli.parse_args(["--output", str(tmp_path), "--model_store", "bigtable"])
    with pytest.raises(config_loader.ConfigError, match="--bigtable_project"):
        cli.zeitgeist_transform(cli.load_config(args))

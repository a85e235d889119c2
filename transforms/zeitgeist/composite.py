"""`Zeitgeist`: searches in, spikes and dips out (MillWheel figure 1)."""

from collections.abc import Callable
from typing import Any

import apache_beam as beam

from transforms.millwheel.dedup import DedupByRecordId
from transforms.millwheel.event_time import require_global_window
from transforms.millwheel.state_params import apply_with_state_params
from transforms.millwheel.typed_params import require_kinds
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.dead_letters import DEAD_LETTERS
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    ModelUpdate,
    SearchQuery,
    WindowCount,
    WindowScore,
)
from transforms.zeitgeist.batch_counts import IDENTIFIED, LATEST, PreCountSearches
from transforms.zeitgeist.batch_detection import WINDOWS, DetectSeries
from transforms.zeitgeist.batch_windows import (
    CountSeries,
    PartialSeries,
    SearchesAsSeries,
)
from transforms.zeitgeist.keying import KeyByQuery
from transforms.zeitgeist.model_calculator import ModelCalculator
from transforms.zeitgeist.params import (
    DetectorParams,
    ModelParams,
    ModelStoreConfig,
    WindowParams,
)
from transforms.zeitgeist.query_keys import fold
from transforms.zeitgeist.spike_dip_detector import SCORES, SpikeDipDetector
from transforms.zeitgeist.window_counter import LATE, CountWindows

ANOMALIES = "anomalies"
WINDOW_COUNTS = "window_counts"
LATE_RECORDS = "late"
# Why searches must come unwindowed (`require_global_window`).
_OWN_WINDOWS = (
    "it buckets event time into windows of its own, of WindowParams(size_ms=...)"
)


class Zeitgeist(beam.PTransform):
    """Spike and dip detection over a stream of `SearchQuery` records.

    The input is a PCollection of `SearchQuery` in the global window, each
    timestamped with its event time (the watermark is the runner's, set by
    the source). The result is a dict of PCollections:

    - ``anomalies``: `Anomaly` records of spike and dip episodes: an
      `OPENED` alert when one starts, a `CLOSED` summary when it ends, an
      `AMENDED` one when a late correction changes it, and for an episode
      still open when a bounded input ends an `OPEN_AT_END` summary (see
      `transforms.zeitgeist.episodes`). Their `query`, as in every output,
      is the normalised key (`key_fn`, by default `fold`: "Spiky Query" is
      "spiky query");
    - ``window_counts``: `WindowCount` per query and window, zero counts
      included while the query is active, corrections with revision > 0;
    - ``scores``: `WindowScore` per query and window, a graded score in
      [0, 1), 0.5 at the alert threshold;
    - ``late``: searches that came after their window was emitted and were
      not folded in (see `transforms.millwheel.lateness`), summed per query,
      window and bundle: a `SearchQuery` whose `count` is their total and
      `event_time` the earliest of them, without record ids (`CountWindows`);
    - ``dead_letters``: `DeadLetter` records for unusable searches.

    With `dedup_horizon_ms`, searches that carry a `record_id` are
    deduplicated per query (`DedupByRecordId`) before counting: a re-sent
    search within the horizon is counted once. Searches without an id (e.g.
    pre-aggregated counts) are counted as they come.

    With `model_store`, each query's model is seeded from and persisted to
    the Bigtable `models` table under sequencer tokens, so it survives a
    restart (see `ModelCalculator`).

    With `scores=False` (or `without_scores()`) no `WindowScore` is built
    and ``scores`` is empty: a job that does not keep them saves building
    and passing on a record per query and window. The other outputs are the
    same.

    Example::

        outputs = searches | Zeitgeist(WindowParams(size_ms=60_000))
        outputs["anomalies"] | beam.Map(print)
    """

    def __init__(
        self,
        window: WindowParams = WindowParams(),
        model: ModelParams = ModelParams(),
        detector: DetectorParams = DetectorParams(),
        key_fn: Callable[[str], str] = fold,
        dedup_horizon_ms: int = 0,
        model_store: ModelStoreConfig | None = None,
        scores: bool = True,
    ):
        super().__init__()
        require_kinds(
            "Zeitgeist",
            ("window", window, WindowParams),
            ("model", model, ModelParams),
            ("detector", detector, DetectorParams),
        )
        if model_store is not None:
            require_kinds("Zeitgeist", ("model_store", model_store, ModelStoreConfig))
        if not callable(key_fn):
            raise TypeError(f"key_fn must be callable, got {key_fn!r}")
        if isinstance(dedup_horizon_ms, bool) or not isinstance(dedup_horizon_ms, int):
            raise TypeError(
                f"dedup_horizon_ms must be an integer, got {dedup_horizon_ms!r}"
            )
        if dedup_horizon_ms < 0:
            raise ValueError(f"dedup_horizon_ms must be >= 0, got {dedup_horizon_ms}")
        self._dedup_horizon_ms = dedup_horizon_ms
        self._model_store = model_store
        self._window = window
        self._model = model
        self._detector = detector
        self._key_fn = key_fn
        self._scores = scores

    def on_batches(self) -> "ZeitgeistOnBatches":
        """This transform, with the same parameters, over Arrow tables of
        searches (`ZeitgeistOnBatches`)."""
        return ZeitgeistOnBatches(**self._parameters())

    def without_scores(self) -> "Zeitgeist":
        """This transform (of the same class), building no `WindowScore`."""
        return type(self)(**{**self._parameters(), "scores": False})

    def _parameters(self) -> dict[str, Any]:
        """The constructor's arguments, for transforms made from this one."""
        return {
            "window": self._window,
            "model": self._model,
            "detector": self._detector,
            "key_fn": self._key_fn,
            "dedup_horizon_ms": self._dedup_horizon_ms,
            "model_store": self._model_store,
            "scores": self._scores,
        }

    def expand(self, searches):
        require_global_window(searches, "Zeitgeist", _OWN_WINDOWS)
        keyed = searches | "KeyByQuery" >> beam.ParDo(
            KeyByQuery(self._key_fn)
        ).with_output_types(
            tuple[str, SearchQuery], **{DEAD_LETTERS: DeadLetter}
        ).with_outputs(DEAD_LETTERS, main="keyed")
        searches_by_key = keyed.keyed
        if self._dedup_horizon_ms:
            searches_by_key = searches_by_key | "DedupByRecordId" >> _DedupIdentified(
                self._dedup_horizon_ms
            )
        return self._detect(searches_by_key, keyed[DEAD_LETTERS])

    def _detect(self, searches_by_key, dead_letters, count_windows=None):
        """Count (with `count_windows`, by default `CountWindows`), model and
        detect; the outputs dict of `expand`."""
        count_windows = count_windows or CountWindows(self._window)
        counted = searches_by_key | "CountWindows" >> count_windows
        # Corrections can reach the model and detector for as long as the
        # counter accepts them: the allowed lateness, plus one window.
        retain_ms = self._window.late_data.allowed_lateness_ms
        if retain_ms:
            retain_ms += self._window.size_ms
        # The model's seasonal memories are slots of windows.
        updates = apply_with_state_params(
            counted.windows,
            "ModelCalculator",
            beam.ParDo(
                ModelCalculator(
                    self._model, self._window.size_ms, retain_ms, self._model_store
                )
            ).with_output_types(tuple[str, ModelUpdate]),
            {"window_ms": self._window.size_ms},
        )
        detected = updates | "SpikeDipDetector" >> beam.ParDo(
            SpikeDipDetector(self._detector, retain_ms, self._scores)
        ).with_output_types(Anomaly, **{SCORES: WindowScore}).with_outputs(
            SCORES, main=ANOMALIES
        )
        return {
            ANOMALIES: detected[ANOMALIES],
            WINDOW_COUNTS: counted.windows
            | "DropKeys" >> beam.Values().with_output_types(WindowCount),
            SCORES: detected[SCORES],
            LATE_RECORDS: counted[LATE],
            DEAD_LETTERS: dead_letters,
        }


class ZeitgeistOnBatches(Zeitgeist):
    """`Zeitgeist` over Arrow tables of searches, as `ReadSearchBatches` reads.

    The input is a bounded PCollection of `pa.Table`s of valid searches
    (`transforms.records.search_screen.SEARCH_SCHEMA`); the outputs are
    those `Zeitgeist` gives for the same searches, record for record. Each
    table is counted per (query, window) in Arrow first (`PreCountSearches`),
    so only each table's partial series of a query goes through Python one by
    one. Searches with a record id still go one by one through `DedupByRecordId`
    when `dedup_horizon_ms` is set. Each query's windows, model and episodes
    then come from its whole series in one pass (`DetectSeries`), or, with a
    model store, from `CountSeries` and the two stateful DoFns. Get one with
    `Zeitgeist(...).on_batches()`.

    Example::

        read = pipeline | ReadSearchBatches("logs/*.parquet")
        outputs = read[RECORDS] | Zeitgeist(WindowParams(60_000)).on_batches()
    """

    def expand(self, tables):
        require_global_window(tables, "Zeitgeist", _OWN_WINDOWS)
        if not tables.is_bounded:
            raise ValueError(
                "Zeitgeist.on_batches() reads a bounded input: each query's "
                "whole series is known in batch only; in streaming, apply "
                "Zeitgeist to SearchQuery records"
            )
        split = bool(self._dedup_horizon_ms)
        counted = tables | "PreCount" >> beam.ParDo(
            PreCountSearches(self._window.size_ms, self._key_fn, split)
        ).with_output_types(
            PartialSeries,
            **{
                IDENTIFIED: tuple[str, SearchQuery],
                LATEST: int,
                DEAD_LETTERS: DeadLetter,
            },
        ).with_outputs(IDENTIFIED, LATEST, DEAD_LETTERS, main="parts")
        parts, latest = counted.parts, counted[LATEST]
        if split:
            unique = counted[IDENTIFIED] | "Dedup" >> _dedup_searches(
                self._dedup_horizon_ms
            )
            unique_series = unique | "UniqueAsSeries" >> SearchesAsSeries(
                self._window.size_ms
            )
            parts = (parts, unique_series) | "Merge" >> beam.Flatten()
            unique_times = unique | "EventTimes" >> beam.Map(
                lambda kv: kv[1].event_time
            )
            latest = (latest, unique_times) | "MergeLatest" >> beam.Flatten()
        if self._model_store:
            # Bounded: each query's windows follow from its whole series, with
            # no timer per window (`CountSeries`); the models go through
            # `ModelCalculator`, which seeds and persists them.
            count_series = CountSeries(self._window, latest)
            return self._detect(parts, counted[DEAD_LETTERS], count_series)
        # Without a store, the model and detector are a loop over each
        # query's whole series, in the same pass (`DetectSeries`).
        detected = parts | "DetectSeries" >> DetectSeries(
            self._window, self._model, self._detector, latest, self._scores
        )
        return {
            ANOMALIES: detected.anomalies,
            WINDOW_COUNTS: detected[WINDOWS],
            SCORES: detected[SCORES],
            LATE_RECORDS: detected[LATE],
            DEAD_LETTERS: counted[DEAD_LETTERS],
        }


class _DedupIdentified(beam.PTransform):
    """`DedupByRecordId` for the searches that have an id; the rest pass."""

    def __init__(self, horizon_ms: int):
        super().__init__()
        self._horizon_ms = horizon_ms

    def expand(self, keyed):
        identified, anonymous = keyed | "SplitById" >> beam.Partition(
            lambda kv, _: 0 if kv[1].record_id else 1, 2
        )
        unique = identified | "Dedup" >> _dedup_searches(self._horizon_ms)
        return (unique, anonymous) | "Merge" >> beam.Flatten()


def _dedup_searches(horizon_ms: int) -> beam.PTransform:
    """`DedupByRecordId` of keyed searches, by their `record_id`."""
    return DedupByRecordId(
        lambda search: search.record_id, horizon_ms
    ).with_output_types(tuple[str, SearchQuery])

"""Model and detector over each query's whole series, for a bounded input.

In a stream, `ModelCalculator` and `SpikeDipDetector` are two keyed
computations, each holding its part of a query's state and releasing the
windows in order as they arrive. A bounded input counted by `CountSeries`
already has each query's whole series in one element, in window order; the
two state machines are then a loop over it (`SeriesJudge`): the same
functions (`fold`, `model_update`, `update_confidence`, `advance`) in the
same order, with the state in local variables. That saves two shuffles and
the state read and written per window, most of a batch job's keyed work.

The records are those of `CountSeries` followed by the two DoFns, with the
same timestamps: window counts and scores at their window's last instant,
an episode's records at the window that caused them, and the summary of an
episode still open at the end of the input at the end of time, where
`SpikeDipDetector`'s end-of-input timer puts it.

Models are not stored: a job with a model store keeps `ModelCalculator`,
which seeds from and persists to Bigtable.
"""

from collections.abc import Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindow

from transforms.millwheel.event_time import restamped
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    DetectorState,
    ModelState,
    SearchQuery,
    WindowCount,
    WindowScore,
)
from transforms.zeitgeist.batch_windows import GroupSeries, input_end, series_counts
from transforms.zeitgeist.confidence import Verdict, update_confidence
from transforms.zeitgeist.episodes import advance, ended_open
from transforms.zeitgeist.forecast import fold
from transforms.zeitgeist.model_calculator import model_update
from transforms.zeitgeist.params import DetectorParams, ModelParams, WindowParams
from transforms.zeitgeist.spike_dip_detector import (
    SCORES,
    EpisodeCounters,
    window_score,
)
from transforms.zeitgeist.window_counter import LATE
from transforms.zeitgeist.window_metrics import WindowCounters

WINDOWS = "windows"


class JudgedWindow(NamedTuple):
    """One window of a query's series, as the model and detector saw it."""

    verdict: Verdict
    score: WindowScore | None  # None when the judge builds no scores
    record: Anomaly | None  # the alert or summary this window emits, if any


class SeriesJudge:
    """One query's model and detector, fed its windows in window order.

    State, for the series: the query's `ModelState` and `DetectorState`,
    both starting empty (as a job without a model store starts them), and
    the previous window, which each `ModelUpdate` links to. With `scores`
    False no `WindowScore` is built.
    """

    def __init__(
        self,
        key: str,
        model: ModelParams,
        detector: DetectorParams,
        window_ms: int,
        scores: bool = True,
    ):
        self._key = key
        self._model = model
        self._detector = detector
        self._window_ms = window_ms
        self._scores = scores
        self._model_state = ModelState()
        self._detector_state = DetectorState()
        self._previous: int | None = None

    def judge(self, window: WindowCount) -> JudgedWindow:
        """Fold `window` into the model, then score it and move its episode on."""
        start = window.window_start
        folded = fold(
            self._model_state, self._model, start, self._window_ms, window.count
        )
        update = model_update(
            self._key, window, folded.prediction, self._previous, folded.new_normal
        )
        self._previous = start
        state = self._detector_state
        verdict = update_confidence(state, update, self._detector)
        score = window_score(update, verdict, state) if self._scores else None
        record = advance(state, update, verdict, self._detector)
        return JudgedWindow(verdict, score, record)

    def end(self) -> Anomaly | None:
        """The summary of the episode still open after the last window."""
        return ended_open(self._detector_state)


class JudgeSeries(beam.DoFn):
    """A query's grouped series (`GroupSeries`) to its `Anomaly` records,
    with its `WindowCount`s under `windows` and its `WindowScore`s under
    `scores` (none if `scores` is False)."""

    def __init__(
        self,
        window: WindowParams,
        model: ModelParams,
        detector: DetectorParams,
        scores: bool = True,
    ):
        self._window = window
        self._model = model
        self._detector = detector
        self._scores = scores
        self._windows_counted = WindowCounters()
        self._episodes_counted = EpisodeCounters()

    def process(
        self, element, window=beam.DoFn.WindowParam, *, input_end: int
    ) -> Iterator[Any]:
        key, parts = element
        judge = SeriesJudge(
            key, self._model, self._detector, self._window.size_ms, self._scores
        )
        for counted in series_counts(key, parts, self._window, input_end):
            stamp = self._windows_counted.stamp(counted)
            judged = judge.judge(counted)
            yield TaggedOutput(WINDOWS, restamped(counted, stamp, window))
            if judged.score is not None:
                yield TaggedOutput(SCORES, restamped(judged.score, stamp, window))
            if judged.record is not None:
                record = self._episodes_counted.count(judged.record)
                yield restamped(record, stamp, window)
        summary = judge.end()
        if summary is not None:
            record = self._episodes_counted.count(summary)
            yield restamped(record, GlobalWindow().max_timestamp(), window)


class DetectSeries(beam.PTransform):
    """`CountSeries`, `ModelCalculator` and `SpikeDipDetector` of a bounded
    input in one pass per query: `PartialSeries` to `Anomaly` records
    (main), `WindowCount`s (`windows`), `WindowScore`s (`scores`, empty if
    `scores` is False) and an empty `late` output.

    `latest_event_times` holds event times whose maximum is the input's last
    search.
    """

    def __init__(
        self,
        window: WindowParams,
        model: ModelParams,
        detector: DetectorParams,
        latest_event_times: beam.PCollection,
        scores: bool = True,
    ):
        super().__init__()
        self._window = window
        self._model = model
        self._detector = detector
        self._latest_event_times = latest_event_times
        self._scores = scores

    def expand(self, parts):
        end = input_end(self._latest_event_times)
        judge = JudgeSeries(self._window, self._model, self._detector, self._scores)
        return (
            parts
            | "Group" >> GroupSeries()
            | "Judge"
            >> beam.ParDo(judge, input_end=end)
            .with_output_types(
                Anomaly,
                **{WINDOWS: WindowCount, SCORES: WindowScore, LATE: SearchQuery},
            )
            .with_outputs(WINDOWS, SCORES, LATE, main="anomalies")
        )

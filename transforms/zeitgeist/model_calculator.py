"""Per-query expected traffic, from earlier windows only.

`ModelCalculator` is Zeitgeist's model computation: keyed by query, it folds
each `WindowCount` into the query's `ModelState` in event-time order and
emits a `ModelUpdate` holding the count next to the prediction that was made
*before* the window was folded in.
"""

import apache_beam as beam
from apache_beam.coders import FloatCoder, MapCoder, ProtoCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)

from transforms.millwheel.event_order import buffer_until_watermark, take_due
from transforms.millwheel.event_time import to_millis
from transforms.records.zeitgeist_pb2 import ModelState, ModelUpdate, WindowCount
from transforms.zeitgeist.forecast import Prediction, fold
from transforms.zeitgeist.params import ModelParams

METRICS_NAMESPACE = "millwheel.zeitgeist"


class ModelCalculator(beam.DoFn):
    """Folds `(query, WindowCount)` into a per-query model; emits `ModelUpdate`.

    Keyed by query. Window counts are buffered until the watermark passes
    their window end (a dynamic event-time timer per window), then folded in
    window order, so the prediction for window w is made from windows before
    w only, whatever order the shuffle delivered them in. A window at or
    before the last one folded is stale (counted, not folded twice).

    State, per query: `pending` window counts not yet due; `model`, the
    query's `ModelState`, kept for the key's lifetime (it is the long-term
    state); `recent`, the predictions of the windows within `retain_ms` of the
    newest, so a late correction (revision > 0) is re-emitted against the
    prediction its window originally had. Corrections do not re-fit the
    model, which has already moved past them.
    """

    PENDING = BagStateSpec("pending", ProtoCoder(WindowCount))
    MODEL = ReadModifyWriteStateSpec("model", ProtoCoder(ModelState))
    RECENT = ReadModifyWriteStateSpec(
        "recent",
        MapCoder(
            VarIntCoder(), TupleCoder((FloatCoder(), FloatCoder(), VarIntCoder()))
        ),
    )
    FOLD = TimerSpec("fold", TimeDomain.WATERMARK)

    def __init__(self, params: ModelParams, window_ms: int, retain_ms: int = 0):
        self._params = params
        self._window_ms = window_ms
        self._retain_ms = retain_ms
        self._stale = Metrics.counter(METRICS_NAMESPACE, "stale_windows")
        self._unmatched = Metrics.counter(
            METRICS_NAMESPACE, "corrections_without_prediction"
        )

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        recent=beam.DoFn.StateParam(RECENT),
        fold_timer=beam.DoFn.TimerParam(FOLD),
    ):
        key, window = element
        if window.revision == 0:
            buffer_until_watermark(
                pending, fold_timer, window, window.window_start, window.window_end
            )
            return
        known = (recent.read() or {}).get(window.window_start)
        if known is None:
            self._unmatched.inc()
            return
        yield key, _update(key, window, Prediction(*known))

    @on_timer(FOLD)
    def on_fold(
        self,
        key=beam.DoFn.KeyParam,
        timestamp=beam.DoFn.TimestampParam,
        pending=beam.DoFn.StateParam(PENDING),
        model=beam.DoFn.StateParam(MODEL),
        recent=beam.DoFn.StateParam(RECENT),
    ):
        due = take_due(
            pending,
            to_millis(timestamp),
            lambda w: w.window_end,
            lambda w: w.window_start,
        )
        if not due:
            return
        state = model.read() or ModelState()
        predictions = recent.read() or {}
        for window in due:
            if state.history and window.window_start <= state.last_window_start:
                self._stale.inc()
                continue
            prediction = fold(
                state, self._params, window.window_start, self._window_ms, window.count
            )
            if self._retain_ms:
                predictions[window.window_start] = (
                    prediction.expected,
                    prediction.stddev,
                    prediction.history,
                )
            yield key, _update(key, window, prediction)
        model.write(state)
        if self._retain_ms:
            horizon = state.last_window_start - self._retain_ms
            recent.write({s: p for s, p in predictions.items() if s > horizon})


def _update(key: str, window: WindowCount, prediction: Prediction) -> ModelUpdate:
    return ModelUpdate(
        query=key,
        window_start=window.window_start,
        window_end=window.window_end,
        actual=window.count,
        expected=prediction.expected,
        stddev=prediction.stddev,
        revision=window.revision,
        history=prediction.history,
    )

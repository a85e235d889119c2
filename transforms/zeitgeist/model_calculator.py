"""Per-query expected traffic, from earlier windows only.

`ModelCalculator` is Zeitgeist's model computation: keyed by query, it folds
each `WindowCount` into the query's `ModelState` in event-time order and
emits a `ModelUpdate` holding the count next to the prediction that was made
*before* the window was folded in.
"""

import apache_beam as beam
from apache_beam.coders import FloatCoder, MapCoder, ProtoCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec

from transforms.millwheel.sequencing import previous_window, release_in_sequence
from transforms.records.zeitgeist_pb2 import ModelState, ModelUpdate, WindowCount
from transforms.zeitgeist.forecast import Prediction, fold
from transforms.zeitgeist.params import ModelParams

METRICS_NAMESPACE = "millwheel.zeitgeist"


class ModelCalculator(beam.DoFn):
    """Folds `(query, WindowCount)` into a per-query model; emits `ModelUpdate`.

    Keyed by query. Windows are folded in the order the WindowCounter emitted
    them, following each window's link to its predecessor: a window that
    arrives before its predecessor waits in `pending`. So the prediction for
    window w is made from windows before w only, whatever order the shuffle
    delivered them in. Outputs carry the timestamp of the input that released
    them, never earlier than their cause.

    State, per query: `pending` windows waiting for their predecessor;
    `model`, the query's `ModelState`, kept for the key's lifetime (it is the
    long-term state); `recent`, the predictions of the windows within
    `retain_ms` of the newest, so a late correction (revision > 0) is
    re-emitted against the prediction its window originally had. Corrections
    do not re-fit the model, which has already moved past them.
    """

    PENDING = BagStateSpec("pending", ProtoCoder(WindowCount))
    MODEL = ReadModifyWriteStateSpec("model", ProtoCoder(ModelState))
    RECENT = ReadModifyWriteStateSpec(
        "recent",
        MapCoder(
            VarIntCoder(), TupleCoder((FloatCoder(), FloatCoder(), VarIntCoder()))
        ),
    )

    def __init__(self, params: ModelParams, window_ms: int, retain_ms: int = 0):
        self._params = params
        self._window_ms = window_ms
        self._retain_ms = retain_ms
        self._gaps = Metrics.counter(METRICS_NAMESPACE, "model_sequence_gaps")
        self._unmatched = Metrics.counter(
            METRICS_NAMESPACE, "corrections_without_prediction"
        )

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        model=beam.DoFn.StateParam(MODEL),
        recent=beam.DoFn.StateParam(RECENT),
    ):
        key, window = element
        if window.revision > 0:
            known = (recent.read() or {}).get(window.window_start)
            if known is None:
                self._unmatched.inc()
                return
            yield key, _update(key, window, Prediction(*known))
            return
        state = model.read() or ModelState()
        due, forced = release_in_sequence(
            pending,
            window,
            state.last_window_start if state.history else None,
            lambda w: w.window_start,
            previous_window,
        )
        if forced:
            self._gaps.inc()
        if not due:
            return
        predictions = (recent.read() or {}) if self._retain_ms else {}
        for ready in due:
            prediction = fold(
                state, self._params, ready.window_start, self._window_ms, ready.count
            )
            predictions[ready.window_start] = (
                prediction.expected,
                prediction.stddev,
                prediction.history,
            )
            yield key, _update(key, ready, prediction)
        model.write(state)
        if self._retain_ms:
            horizon = state.last_window_start - self._retain_ms
            recent.write({s: p for s, p in predictions.items() if s > horizon})


def _update(key: str, window: WindowCount, prediction: Prediction) -> ModelUpdate:
    update = ModelUpdate(
        query=key,
        window_start=window.window_start,
        window_end=window.window_end,
        actual=window.count,
        expected=prediction.expected,
        stddev=prediction.stddev,
        revision=window.revision,
        history=prediction.history,
    )
    if window.HasField("previous_window_start"):
        update.previous_window_start = window.previous_window_start
    return update

"""Reporting spikes and dips from model updates, in window order per query."""

import apache_beam as beam
from apache_beam.coders import FloatCoder, MapCoder, ProtoCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec

from transforms.millwheel.sequencing import previous_window, release_in_sequence
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    ModelUpdate,
    WindowScore,
)
from transforms.zeitgeist.confidence import Confidence, Verdict, update_confidence
from transforms.zeitgeist.params import DetectorParams

SCORES = "scores"
METRICS_NAMESPACE = "millwheel.zeitgeist"


class SpikeDipDetector(beam.DoFn):
    """`(query, ModelUpdate)` to `Anomaly`, plus a `WindowScore` per window.

    Keyed by query. Updates are scored in window order, following each
    update's link to the previous window (the confidence accumulates across
    consecutive windows, so order matters); an update that arrives before
    its predecessor waits in `pending`. Every window yields a `WindowScore`
    on the `scores` tag; windows whose confidence passes the threshold also
    yield an `Anomaly` on the main output.

    State, per query: `pending` updates waiting for their predecessor;
    `confidence`, the spike and dip confidences and the last window scored;
    `recent`, the confidence before each window within `retain_ms`, so that a
    late correction (revision > 0) is re-scored from where its window
    started. A correction re-scores its own window only; later windows keep
    their verdicts.
    """

    PENDING = BagStateSpec("pending", ProtoCoder(ModelUpdate))
    CONFIDENCE = ReadModifyWriteStateSpec(
        "confidence", TupleCoder((FloatCoder(), FloatCoder(), VarIntCoder()))
    )
    RECENT = ReadModifyWriteStateSpec(
        "recent", MapCoder(VarIntCoder(), TupleCoder((FloatCoder(), FloatCoder())))
    )

    def __init__(self, params: DetectorParams, retain_ms: int = 0):
        self._params = params
        self._retain_ms = retain_ms
        self._anomalies = {
            kind: Metrics.counter(METRICS_NAMESPACE, f"{kind.lower()}s_detected")
            for kind in ("SPIKE", "DIP")
        }
        self._gaps = Metrics.counter(METRICS_NAMESPACE, "detector_sequence_gaps")
        self._unmatched = Metrics.counter(
            METRICS_NAMESPACE, "corrections_without_confidence"
        )

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        confidence=beam.DoFn.StateParam(CONFIDENCE),
        recent=beam.DoFn.StateParam(RECENT),
    ):
        _, update = element
        if update.revision > 0:
            before = (recent.read() or {}).get(update.window_start)
            if before is None:
                self._unmatched.inc()
                return
            verdict = update_confidence(Confidence(*before), update, self._params)
            yield from self._emit(update, verdict)
            return
        stored = confidence.read()
        current = Confidence(*stored[:2]) if stored else Confidence()
        due, forced = release_in_sequence(
            pending,
            update,
            stored[2] if stored else None,
            lambda u: u.window_start,
            previous_window,
        )
        if forced:
            self._gaps.inc()
        if not due:
            return
        befores = (recent.read() or {}) if self._retain_ms else {}
        for ready in due:
            befores[ready.window_start] = (current.spike, current.dip)
            verdict = update_confidence(current, ready, self._params)
            current = verdict.confidence
            yield from self._emit(ready, verdict)
        last_start = due[-1].window_start
        confidence.write((current.spike, current.dip, last_start))
        if self._retain_ms:
            horizon = last_start - self._retain_ms
            recent.write({s: c for s, c in befores.items() if s > horizon})

    def _emit(self, update: ModelUpdate, verdict: Verdict):
        yield beam.pvalue.TaggedOutput(
            SCORES,
            WindowScore(
                query=update.query,
                window_start=update.window_start,
                window_end=update.window_end,
                actual=update.actual,
                expected=update.expected,
                stddev=update.stddev,
                score=verdict.score,
                spike_confidence=verdict.confidence.spike,
                dip_confidence=verdict.confidence.dip,
                revision=update.revision,
                history=update.history,
            ),
        )
        if verdict.kind is None:
            return
        self._anomalies[verdict.kind].inc()
        yield Anomaly(
            query=update.query,
            kind=AnomalyKind.Value(verdict.kind),
            window_start=update.window_start,
            window_end=update.window_end,
            actual=update.actual,
            expected=update.expected,
            score=verdict.score,
            revision=update.revision,
        )

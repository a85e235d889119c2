"""Reporting spikes and dips from model updates, in window order per query."""

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

    Keyed by query. Updates are buffered until the watermark passes their
    window end and then scored in window order (the confidence accumulates
    across consecutive windows, so order matters). Every window yields a
    `WindowScore` on the `scores` tag; windows whose confidence passes the
    threshold also yield an `Anomaly` on the main output, stamped with the
    window end like their cause.

    State, per query: `pending` updates not yet due; `confidence`, the spike
    and dip confidences and the last window scored; `recent`, the confidence
    before each window within `retain_ms`, so that a late correction
    (revision > 0) is re-scored from where its window started. A correction
    re-scores its own window only; later windows keep their verdicts.
    """

    PENDING = BagStateSpec("pending", ProtoCoder(ModelUpdate))
    CONFIDENCE = ReadModifyWriteStateSpec(
        "confidence", TupleCoder((FloatCoder(), FloatCoder(), VarIntCoder()))
    )
    RECENT = ReadModifyWriteStateSpec(
        "recent", MapCoder(VarIntCoder(), TupleCoder((FloatCoder(), FloatCoder())))
    )
    SCORE = TimerSpec("score", TimeDomain.WATERMARK)

    def __init__(self, params: DetectorParams, retain_ms: int = 0):
        self._params = params
        self._retain_ms = retain_ms
        self._anomalies = {
            kind: Metrics.counter(METRICS_NAMESPACE, f"{kind.lower()}s_detected")
            for kind in ("SPIKE", "DIP")
        }
        self._unmatched = Metrics.counter(
            METRICS_NAMESPACE, "corrections_without_confidence"
        )

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        recent=beam.DoFn.StateParam(RECENT),
        score_timer=beam.DoFn.TimerParam(SCORE),
    ):
        _, update = element
        if update.revision == 0:
            buffer_until_watermark(
                pending, score_timer, update, update.window_start, update.window_end
            )
            return
        before = (recent.read() or {}).get(update.window_start)
        if before is None:
            self._unmatched.inc()
            return
        yield from self._emit(
            update, update_confidence(Confidence(*before), update, self._params)
        )

    @on_timer(SCORE)
    def on_score(
        self,
        timestamp=beam.DoFn.TimestampParam,
        pending=beam.DoFn.StateParam(PENDING),
        confidence=beam.DoFn.StateParam(CONFIDENCE),
        recent=beam.DoFn.StateParam(RECENT),
    ):
        due = take_due(
            pending,
            to_millis(timestamp),
            lambda u: u.window_end,
            lambda u: u.window_start,
        )
        if not due:
            return
        spike, dip, last_start = confidence.read() or (0.0, 0.0, -1)
        current = Confidence(spike, dip)
        befores = recent.read() or {}
        for update in due:
            if update.window_start <= last_start:
                continue
            if self._retain_ms:
                befores[update.window_start] = (current.spike, current.dip)
            verdict = update_confidence(current, update, self._params)
            current, last_start = verdict.confidence, update.window_start
            yield from self._emit(update, verdict)
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

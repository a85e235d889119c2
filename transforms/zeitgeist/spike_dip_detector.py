"""Reporting spike and dip episodes from model updates, in window order."""

import apache_beam as beam
from apache_beam.coders import MapCoder, ProtoCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)

from transforms.millwheel.sequencing import previous_window, release_in_sequence
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    DetectorState,
    EpisodeStatus,
    ModelUpdate,
    WindowScore,
)
from transforms.zeitgeist.confidence import Verdict, update_confidence
from transforms.zeitgeist.episodes import advance, amended, ended_open
from transforms.zeitgeist.metrics import METRICS_NAMESPACE
from transforms.zeitgeist.params import DetectorParams

SCORES = "scores"


class SpikeDipDetector(beam.DoFn):
    """`(query, ModelUpdate)` to `Anomaly` episode records, plus a `WindowScore`.

    Keyed by query. Updates are scored in window order, following each
    update's link to the previous window (the evidence accumulates across
    consecutive windows, so order matters); an update that arrives before
    its predecessor waits in `pending`. Every window yields a `WindowScore`
    on the `scores` tag, unless `scores` is False (a job that does not keep
    them skips building one record per window). The main output has one
    `OPENED` record per episode, emitted in the window where it opens (the
    alert), and one `CLOSED` record when it ends (see
    `transforms.zeitgeist.episodes`): an episode closes on the quiet windows
    that follow it.

    Timer: `end_of_input` (event time, the end of the key's window: the
    global window's, so it fires only once the watermark reaches +inf, when
    a bounded input or a drained stream has ended), set when an episode
    opens; it summarises an episode still open then as `OPEN_AT_END`, once
    it has fired twice with no window scored in between (`end_checked`).
    A runner that fires a stage's due timers in rounds, as Beam's
    FnApiRunner does, can fire it while the counter upstream, in the same
    stage, still has silent windows to emit, one round each: the second
    firing finds the query's windows over. Beam's bundle-based DirectRunner
    in streaming does not hold the watermark for timers at all, so a
    `TestStream` that jumps straight to +inf can fire it twice between two
    of those windows: end one at a finite watermark past the activity
    horizon first (README, "Use the transforms in your own Beam job").

    State, per query, for the key's lifetime: `pending` updates waiting for
    their predecessor; `detector`, the `DetectorState` (evidence, its
    long-run mean, the open episode, the last window scored, the lone
    rule's far tail `deviation_record`, and the query's highest and lowest
    counts `value_high` and `value_low`, its share of far windows
    `far_share`, the autocorrelation of its deviations, and the counts it
    has had, `visited_bins`: at most 128 bytes); `recent`, the
    state before each window within `retain_ms`, so that a late correction
    (revision > 0) is re-scored from where its window started. A correction
    re-scores its own window only, and if that window is now abnormal it
    yields an `AMENDED` one-window episode with the correction's revision;
    `end_checked`, the last window scored when `end_of_input` last fired,
    until it summarises.
    """

    PENDING = BagStateSpec("pending", ProtoCoder(ModelUpdate))
    DETECTOR = ReadModifyWriteStateSpec("detector", ProtoCoder(DetectorState))
    RECENT = ReadModifyWriteStateSpec(
        "recent", MapCoder(VarIntCoder(), ProtoCoder(DetectorState))
    )
    END_CHECKED = ReadModifyWriteStateSpec("end_checked", VarIntCoder())
    END_OF_INPUT = TimerSpec("end_of_input", TimeDomain.WATERMARK)

    def __init__(self, params: DetectorParams, retain_ms: int = 0, scores: bool = True):
        self._params = params
        self._retain_ms = retain_ms
        self._scores = scores
        self._counted = EpisodeCounters()
        self._gaps = Metrics.counter(METRICS_NAMESPACE, "detector_sequence_gaps")
        self._unmatched = Metrics.counter(
            METRICS_NAMESPACE, "corrections_without_confidence"
        )

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        detector=beam.DoFn.StateParam(DETECTOR),
        recent=beam.DoFn.StateParam(RECENT),
        end_of_input=beam.DoFn.TimerParam(END_OF_INPUT),
        window=beam.DoFn.WindowParam,
    ):
        _, update = element
        if update.revision > 0:
            yield from self._correct(update, recent)
            return
        state = detector.read() or DetectorState()
        due, forced = release_in_sequence(
            pending,
            update,
            state.last_window_start if state.HasField("last_window_start") else None,
            lambda u: u.window_start,
            previous_window,
        )
        if forced:
            self._gaps.inc()
        if not due:
            return
        befores = (recent.read() or {}) if self._retain_ms else {}
        for ready in due:
            if self._retain_ms:
                befores[ready.window_start] = _copy(state)
            verdict = update_confidence(state, ready, self._params)
            if self._scores:
                yield _score(ready, verdict, state)
            record = advance(state, ready, verdict, self._params)
            if record is not None:
                yield self._counted.count(record)
                if record.status == EpisodeStatus.OPENED:
                    end_of_input.set(window.max_timestamp())
        state.last_window_start = due[-1].window_start
        detector.write(state)
        if self._retain_ms:
            horizon = state.last_window_start - self._retain_ms
            recent.write({s: c for s, c in befores.items() if s > horizon})

    @on_timer(END_OF_INPUT)
    def summarise_open_episode(
        self,
        detector=beam.DoFn.StateParam(DETECTOR),
        end_checked=beam.DoFn.StateParam(END_CHECKED),
        end_of_input=beam.DoFn.TimerParam(END_OF_INPUT),
        fired_at=beam.DoFn.TimestampParam,
    ):
        state = detector.read()
        if state is None:
            return
        # Windows scored since the last firing: the input may not be over
        # for this query yet (see the class docstring); look again.
        if end_checked.read() != state.last_window_start:
            end_checked.write(state.last_window_start)
            end_of_input.set(fired_at)
            return
        end_checked.clear()
        summary = ended_open(state)
        if summary is None:
            return
        detector.write(state)
        yield self._counted.count(summary)

    def _correct(self, update: ModelUpdate, recent):
        before = (recent.read() or {}).get(update.window_start)
        if before is None:
            self._unmatched.inc()
            return
        state = _copy(before)
        verdict = update_confidence(state, update, self._params)
        if self._scores:
            yield _score(update, verdict, state)
        if verdict.kind is not None:
            yield self._counted.count(amended(update, verdict))


class EpisodeCounters:
    """The detector's metrics: episodes by kind as they open (or are
    amended), episodes closed, episodes still open when the input ended."""

    def __init__(self) -> None:
        self._opened = {
            kind: Metrics.counter(METRICS_NAMESPACE, f"{kind.lower()}s_detected")
            for kind in ("SPIKE", "DIP")
        }
        self._ended = {
            EpisodeStatus.CLOSED: Metrics.counter(METRICS_NAMESPACE, "episodes_closed"),
            EpisodeStatus.OPEN_AT_END: Metrics.counter(
                METRICS_NAMESPACE, "episodes_open_at_end"
            ),
        }

    def count(self, record: Anomaly) -> Anomaly:
        """Count `record`; return it."""
        ended = self._ended.get(record.status)
        if ended is not None:
            ended.inc()
        else:
            self._opened[AnomalyKind.Name(record.kind)].inc()
        return record


def window_score(
    update: ModelUpdate, verdict: Verdict, state: DetectorState
) -> WindowScore:
    """The score record of a window judged into `state`."""
    # Field by field, as `model_update` builds its update: upb's constructor
    # takes keywords at a higher cost than setting the same fields.
    score = WindowScore()
    score.query = update.query
    score.window_start = update.window_start
    score.window_end = update.window_end
    score.actual = update.actual
    score.expected = update.expected
    score.stddev = update.stddev
    score.score = verdict.score
    score.spike_confidence = state.spike
    score.dip_confidence = state.dip
    score.revision = update.revision
    score.history = update.history
    score.deviation = update.deviation
    return score


def _score(update: ModelUpdate, verdict: Verdict, state: DetectorState):
    return beam.pvalue.TaggedOutput(SCORES, window_score(update, verdict, state))


def _copy(state: DetectorState) -> DetectorState:
    copy = DetectorState()
    copy.CopyFrom(state)
    return copy

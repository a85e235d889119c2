"""Model and detector semantics: dips on the watermark, no look-ahead."""

import apache_beam as beam
import pytest
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import TimestampedValue

from testing.scenarios import ZeitgeistScenario
from tests.zeitgeist.streaming import MINUTE, T0, streaming_pipeline, window_index
from transforms.millwheel.event_time import to_timestamp
from transforms.records.zeitgeist_pb2 import (
    CLOSED,
    DIP,
    OPEN_AT_END,
    OPENED,
    SPIKE,
    SearchQuery,
)
from transforms.zeitgeist.composite import ANOMALIES, SCORES, Zeitgeist
from transforms.zeitgeist.params import DetectorParams, WindowParams

PARAMS = WindowParams(size_ms=MINUTE, activity_horizon_windows=5)
DETECTOR = DetectorParams(min_history_windows=10)


def steady(scenario, query, windows, per_window, skip=()):
    """`per_window` searches (as one pre-aggregated record) in each window."""
    for w in range(windows):
        if w not in skip:
            scenario.add(query, T0 + w * MINUTE + 10, count=per_window)
    return scenario


def test_dip_is_reported_when_the_watermark_passes_with_no_records():
    scenario = steady(ZeitgeistScenario(), "q", windows=30, per_window=100)
    scenario.advance_watermark(T0 + 30 * MINUTE)
    # No search arrives any more; only the watermark moves on.
    scenario.advance_watermark(T0 + 32 * MINUTE)
    pipeline = streaming_pipeline()
    outputs = pipeline | scenario.build() | Zeitgeist(PARAMS, detector=DETECTOR)

    def one_dip_alert_in_the_second_silent_window(anomalies):
        # One window, however far off, adds at most `max_deviation_sigma`
        # minus the slack (5, not above the threshold of 5): the second
        # silent window opens the episode.
        assert [
            (window_index(a.window_start), a.kind, a.status) for a in anomalies
        ] == [(31, DIP, OPENED)]
        (dip,) = anomalies
        assert dip.actual == 0 and dip.episode_start == dip.window_start

    with pipeline:
        assert_that(outputs[ANOMALIES], one_dip_alert_in_the_second_silent_window)


def test_a_spike_raises_one_alert_and_a_summary_when_it_is_over():
    spike = {20: 250, 21: 300, 22: 250}
    scenario = steady(ZeitgeistScenario(), "q", windows=45, per_window=100, skip=spike)
    for w, count in spike.items():
        scenario.add("q", T0 + w * MINUTE + 10, count=count)
    pipeline = streaming_pipeline()
    outputs = pipeline | scenario.build() | Zeitgeist(PARAMS, detector=DETECTOR)

    def opened_at_21_closed_with_its_peak(anomalies):
        while_active = sorted(
            (a for a in anomalies if window_index(a.window_start) < 45),
            key=lambda a: a.status,
        )
        assert [(a.status, a.kind) for a in while_active] == [
            (OPENED, SPIKE),
            (CLOSED, SPIKE),
        ]
        alert, summary = while_active
        assert window_index(alert.window_start) == 21
        assert alert.actual == 300 and abs(alert.expected - 100) < 5
        assert alert.score > 0.5
        assert window_index(summary.episode_start) == 21
        # Window 22 still deviates and keeps the evidence over the threshold.
        assert window_index(summary.episode_end) == 23
        assert summary.duration_windows == 2
        assert window_index(summary.peak_window_start) == 21
        assert summary.peak_actual == 300 and summary.peak_deviation > 6

    with pipeline:
        assert_that(outputs[ANOMALIES], opened_at_21_closed_with_its_peak)


def check_scores(counts_by_query, check):
    """Run one query per entry of `counts_by_query`; `check` gets the scores.

    `check` receives {query: {window index: WindowScore}} inside the matcher,
    where the assertions must run (the matcher is a copy in the runner).
    """
    pipeline = streaming_pipeline()
    scenario = ZeitgeistScenario()
    for query, counts in counts_by_query.items():
        for w, count in enumerate(counts):
            scenario.add(query, T0 + w * MINUTE, count=count)
    outputs = pipeline | scenario.build() | Zeitgeist(PARAMS, detector=DETECTOR)

    def matcher(scores):
        by_query = {}
        for score in scores:
            by_query.setdefault(score.query, {})[window_index(score.window_start)] = (
                score
            )
        check(by_query)

    with pipeline:
        assert_that(outputs[SCORES], matcher)


def test_prediction_and_score_for_a_window_never_use_later_windows():
    base = [50, 52, 48, 51, 49, 50, 53, 47, 50, 51, 49, 50, 52, 48, 50, 49, 51]
    w = 12
    changed = list(base)
    changed[w] = 400

    def same_up_to_w(scores):
        original, altered = scores["original"], scores["altered"]
        assert set(original) == set(altered) == set(range(len(base) + 5))
        for index in range(w + 1):
            assert original[index].expected == altered[index].expected
            assert original[index].stddev == altered[index].stddev
        for index in range(w):
            assert original[index].score == altered[index].score
            assert original[index].deviation == altered[index].deviation
        assert altered[w].actual == 400
        assert altered[w].score > original[w].score
        # Window w is folded in after its prediction: later ones move.
        assert original[w + 1].expected != altered[w + 1].expected

    check_scores({"original": base, "altered": changed}, same_up_to_w)


def test_scores_rise_with_the_evidence_past_the_threshold():
    counts = [20] * 15 + [0, 0, 0, 20, 20]

    def graded(scores):
        (by_window,) = scores.values()
        assert [by_window[i].actual for i in range(len(counts))] == counts
        assert all(0.0 <= s.score < 1.0 for s in by_window.values())
        silent = [by_window[i].score for i in (15, 16, 17)]
        # Each silent window adds evidence: the score goes on rising after
        # it passes 0.5 (the threshold) instead of stopping there.
        assert silent[0] <= 0.5 < silent[1] < silent[2]
        assert by_window[14].score < silent[0]

    check_scores({"q": counts}, graded)


def _bounded_zeitgeist(records: list[SearchQuery]):
    """A batch pipeline of `records` through `Zeitgeist`, and its outputs."""
    pipeline = beam.Pipeline()
    outputs = (
        pipeline
        | beam.Create(records)
        | beam.Map(lambda s: TimestampedValue(s, to_timestamp(s.event_time)))
        | Zeitgeist(PARAMS, detector=DETECTOR)
    )
    return pipeline, outputs


def test_a_dip_over_the_last_silent_windows_of_a_bounded_input_is_one_episode():
    # "q" stops 20 windows before the input ends, so the counter's last
    # windows for it are silent ones, each fired by a timer the one before
    # set. On Beam's FnApiRunner, which fires a stage's due timers in rounds,
    # the end-of-input summary used to fire between two of them: six
    # one- and two-window episodes instead of one.
    records = [
        SearchQuery(query="q", event_time=T0 + w * MINUTE + 10, count=100)
        for w in range(30)
    ] + [
        SearchQuery(query="other", event_time=T0 + w * MINUTE + 10, count=100)
        for w in range(50)
    ]
    pipeline, outputs = _bounded_zeitgeist(records)

    def one_dip_summarised_at_the_end(anomalies):
        dips = sorted((a for a in anomalies if a.query == "q"), key=lambda a: a.status)
        assert [(a.kind, a.status) for a in dips] == [(DIP, OPENED), (DIP, OPEN_AT_END)]
        alert, summary = dips
        assert window_index(alert.window_start) == 31  # the second silent one
        assert summary.episode_start == alert.window_start
        # Silent windows 30 to 34: the counter's activity horizon of 5.
        assert window_index(summary.episode_end) == 35
        assert summary.duration_windows == 4
        assert not [a for a in anomalies if a.query == "other"]

    with pipeline:
        assert_that(outputs[ANOMALIES], one_dip_summarised_at_the_end)


def test_an_episode_open_when_a_bounded_input_ends_gets_an_open_at_end_summary():
    # A spike in the last three windows of a bounded input: no quiet windows
    # follow to close it, so the end of the input summarises it.
    spike = {27: 300, 28: 320, 29: 310}
    records = [
        SearchQuery(query="q", event_time=T0 + w * MINUTE + 10, count=spike.get(w, 100))
        for w in range(30)
    ]
    pipeline, outputs = _bounded_zeitgeist(records)

    def alert_then_open_at_end_summary(anomalies):
        spikes = sorted(
            (a for a in anomalies if a.kind == SPIKE), key=lambda a: a.status
        )
        assert [a.status for a in spikes] == [OPENED, OPEN_AT_END]
        alert, summary = spikes
        assert summary.episode_start == alert.window_start
        assert window_index(alert.window_start) in (27, 28)
        # The last abnormal window is the input's last spike window.
        assert window_index(summary.episode_end) == 30
        assert summary.duration_windows == 30 - window_index(alert.window_start)
        assert summary.peak_actual == 320

    with pipeline:
        assert_that(outputs[ANOMALIES], alert_then_open_at_end_summary)


def test_zeitgeist_on_batches_refuses_an_unbounded_input_with_a_clear_error():
    # Each query's whole series is known only once a bounded input is read.
    pipeline = streaming_pipeline()
    tables = pipeline | TestStream().add_elements([]).advance_watermark_to_infinity()
    with pytest.raises(ValueError, match="known in batch only"):
        tables | Zeitgeist(WindowParams(size_ms=MINUTE)).on_batches()

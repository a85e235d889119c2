"""Model and detector semantics: dips on the watermark, no look-ahead."""

from apache_beam.testing.util import assert_that

from testing.scenarios import ZeitgeistScenario
from tests.zeitgeist.streaming import MINUTE, T0, streaming_pipeline, window_index
from transforms.records.zeitgeist_pb2 import DIP, SPIKE
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

    def first_dip_is_window_30(anomalies):
        dips = sorted(window_index(a.window_start) for a in anomalies if a.kind == DIP)
        assert dips and dips[0] == 30, dips
        assert all(a.actual == 0 for a in anomalies if a.kind == DIP)
        assert not [a for a in anomalies if a.kind == SPIKE]

    with pipeline:
        assert_that(outputs[ANOMALIES], first_dip_is_window_30)


def test_spike_is_reported_in_the_window_it_starts():
    scenario = steady(ZeitgeistScenario(), "q", windows=30, per_window=100, skip={20})
    scenario.add("q", T0 + 20 * MINUTE + 10, count=250)
    pipeline = streaming_pipeline()
    outputs = pipeline | scenario.build() | Zeitgeist(PARAMS, detector=DETECTOR)

    def one_spike_at_20(anomalies):
        # After window 29 the traffic stops for good: dips, rightly.
        while_active = [a for a in anomalies if window_index(a.window_start) < 30]
        assert [(window_index(a.window_start), a.kind) for a in while_active] == [
            (20, SPIKE)
        ]
        (spike,) = while_active
        assert spike.actual == 250 and abs(spike.expected - 100) < 5
        assert spike.score == 1.0

    with pipeline:
        assert_that(outputs[ANOMALIES], one_spike_at_20)


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


def test_prediction_for_a_window_never_uses_that_window():
    base = [50, 52, 48, 51, 49, 50, 53, 47, 50, 51, 49, 50, 52, 48, 50]
    w = 11
    changed = list(base)
    changed[w] = 400

    def same_prediction_up_to_w(scores):
        original, altered = scores["original"], scores["altered"]
        assert set(original) == set(altered) == set(range(len(base) + 5))
        for index in range(w + 1):
            assert original[index].expected == altered[index].expected
            assert original[index].stddev == altered[index].stddev
        assert altered[w].actual == 400
        # Window w is folded in after its prediction: later ones move.
        assert original[w + 1].expected != altered[w + 1].expected

    check_scores({"original": base, "altered": changed}, same_prediction_up_to_w)


def test_scores_lie_in_the_unit_interval_and_one_per_window():
    counts = [20] * 15 + [0, 0, 90, 20, 20]

    def bounded(scores):
        (by_window,) = scores.values()
        assert all(0.0 <= s.score <= 1.0 for s in by_window.values())
        assert [by_window[i].actual for i in range(len(counts))] == counts
        assert by_window[17].score == 1.0

    check_scores({"q": counts}, bounded)

"""Episode-level scoring on small cases worked out by hand."""

from types import SimpleNamespace

import pytest

from testing.evaluator import FalseAlarm, evaluate, false_alarms_per_query_week
from testing.zeitgeist_generator import DIP, SPIKE, Episode
from transforms.records import zeitgeist_pb2

W = 100  # window length in ms, so window k starts at k * 100
A_SPIKE = Episode("a", SPIKE, 1000, 1300, 5.0)  # windows 10-12
A_DIP = Episode("a", DIP, 3000, 3200, 6.0)  # windows 30-31, tolerance to 3400
B_SPIKE = Episode("b", SPIKE, 2000, 2500, 4.5)  # windows 20-24
B_DIP = Episode("b", DIP, 5000, 5300, 7.0)  # never detected
EPISODES = [A_SPIKE, A_DIP, B_SPIKE, B_DIP]


def anomaly(query, kind, window_start, revision=0):
    return zeitgeist_pb2.Anomaly(
        query=query,
        kind=kind,
        window_start=window_start,
        window_end=window_start + W,
        revision=revision,
    )


ANOMALIES = [
    # A_SPIKE found one window in, then re-detected and revised.
    anomaly("a", zeitgeist_pb2.SPIKE, 1100),
    anomaly("a", zeitgeist_pb2.SPIKE, 1200),
    anomaly("a", zeitgeist_pb2.SPIKE, 1200, revision=1),
    # A_DIP found inside the tolerance, three windows after its start...
    anomaly("a", zeitgeist_pb2.DIP, 3300),
    # ...then a run past the tolerance: one false alarm.
    anomaly("a", zeitgeist_pb2.DIP, 3400),
    anomaly("a", zeitgeist_pb2.DIP, 3500),
    # B_SPIKE found at once, and again later within the episode.
    anomaly("b", zeitgeist_pb2.SPIKE, 2000),
    anomaly("b", zeitgeist_pb2.SPIKE, 2400),
    # Right query and time as B_SPIKE, wrong kind: a false alarm.
    anomaly("b", zeitgeist_pb2.DIP, 2100),
    # A query without episodes: two runs, two false alarms.
    anomaly("c", zeitgeist_pb2.SPIKE, 700),
    anomaly("c", zeitgeist_pb2.SPIKE, 800),
    anomaly("c", zeitgeist_pb2.SPIKE, 900),
    anomaly("c", zeitgeist_pb2.SPIKE, 1100),
]


def tally(score):
    """(true positives, false negatives, false positives)."""
    return score.true_positives, score.false_negatives, score.false_positives


def test_counts_per_kind_and_overall():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W)
    assert tally(report.by_kind[SPIKE]) == (2, 0, 2)
    assert tally(report.by_kind[DIP]) == (1, 1, 2)
    assert tally(report.overall) == (3, 1, 4)


def test_precision_recall_and_f1():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W)
    spike, dip, overall = report.by_kind[SPIKE], report.by_kind[DIP], report.overall
    assert (spike.precision, spike.recall, spike.f1) == pytest.approx((0.5, 1.0, 2 / 3))
    assert (dip.precision, dip.recall, dip.f1) == pytest.approx((1 / 3, 0.5, 0.4))
    assert (overall.precision, overall.recall, overall.f1) == pytest.approx(
        (3 / 7, 0.75, 6 / 11)
    )


def test_delays_in_windows():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W)
    assert sorted(report.by_kind[SPIKE].delays) == [0, 1]
    assert report.by_kind[SPIKE].median_delay == 0.5
    assert report.by_kind[DIP].delays == (3,)
    assert sorted(report.overall.delays) == [0, 1, 3]
    assert report.overall.median_delay == 1


def test_misses_and_false_alarms_are_listed():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W)
    assert report.missed == (B_DIP,)
    assert set(report.false_alarms) == {
        FalseAlarm("a", DIP, 3400, 3600),
        FalseAlarm("b", DIP, 2100, 2200),
        FalseAlarm("c", SPIKE, 700, 1000),
        FalseAlarm("c", SPIKE, 1100, 1200),
    }


def test_without_tolerance_a_late_detection_is_a_false_alarm():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W, tolerance_windows=0)
    # A_DIP is now missed, and 3300-3500 merge into a single false alarm.
    assert tally(report.by_kind[DIP]) == (0, 2, 2)
    assert FalseAlarm("a", DIP, 3300, 3600) in report.false_alarms


def test_episodes_below_the_magnitude_floor_are_neither_required_nor_penalised():
    report = evaluate(ANOMALIES, EPISODES, window_ms=W, min_magnitude_sigma=5.0)
    spike = report.by_kind[SPIKE]
    # B_SPIKE (4.5 sigma) drops out; its two detections are not false alarms.
    assert tally(spike) == (1, 0, 2)
    assert spike.precision == pytest.approx(1 / 3)
    assert report.by_kind[DIP].true_positives == 1

    quiet_b = [a for a in ANOMALIES if a.query != "b" or a.kind != zeitgeist_pb2.SPIKE]
    report = evaluate(quiet_b, EPISODES, window_ms=W, min_magnitude_sigma=5.0)
    assert B_SPIKE not in report.missed


def test_plain_objects_with_kind_names_are_accepted():
    detections = [
        SimpleNamespace(query="a", kind="spike", window_start=1000),
        SimpleNamespace(query="a", kind="DIP", window_start=3000),
    ]
    report = evaluate(detections, EPISODES, window_ms=W)
    assert report.overall.true_positives == 2
    assert report.overall.delays == (0, 0)


def test_no_detections_is_vacuously_precise_but_recalls_nothing():
    report = evaluate([], EPISODES, window_ms=W)
    assert report.overall.precision == 1.0
    assert report.overall.recall == 0.0
    assert report.overall.f1 == 0.0
    assert report.overall.median_delay is None
    assert set(report.missed) == set(EPISODES)


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="SPIKE or DIP"):
        evaluate([anomaly("a", 0, 1000)], EPISODES, window_ms=W)


def test_false_alarms_per_query_week():
    week = 7 * 24 * 3600 * 1000
    detections = [
        anomaly("q1", zeitgeist_pb2.SPIKE, 0),
        anomaly("q1", zeitgeist_pb2.SPIKE, 100),
        anomaly("q1", zeitgeist_pb2.SPIKE, 200),
        anomaly("q1", zeitgeist_pb2.DIP, 0),
        anomaly("q2", zeitgeist_pb2.SPIKE, 500),
        anomaly("q2", zeitgeist_pb2.SPIKE, 700),
    ]
    # 4 alarms over 4 queries for 2 weeks.
    rate = false_alarms_per_query_week(detections, 4, 2 * week, window_ms=W)
    assert rate == pytest.approx(0.5)


@pytest.mark.parametrize("num_queries, duration_ms", [(0, 10**9), (4, 0)])
def test_false_alarms_per_query_week_of_no_queries_or_time_is_refused(
    num_queries, duration_ms
):
    # Before, a ZeroDivisionError.
    with pytest.raises(ValueError, match="num_queries and duration_ms must be"):
        false_alarms_per_query_week([], num_queries, duration_ms, window_ms=W)


def test_format_shows_one_row_per_kind_and_overall():
    text = evaluate(ANOMALIES, EPISODES, window_ms=W).format()
    lines = text.splitlines()
    assert lines[0].split() == [
        "kind",
        "TP",
        "FN",
        "FP",
        "precision",
        "recall",
        "F1",
        "median",
        "delay",
    ]
    assert lines[1].split() == [
        "SPIKE",
        "2",
        "0",
        "2",
        "0.500",
        "1.000",
        "0.667",
        "0.5",
    ]
    assert lines[2].split() == ["DIP", "1", "1", "2", "0.333", "0.500", "0.400", "3.0"]
    assert lines[3].split() == ["all", "3", "1", "4", "0.429", "0.750", "0.545", "1.0"]


def test_format_shows_no_score_where_nothing_was_raised_or_injected():
    # A live demo stopped before its first injected episode: no TP, FN or
    # FP. The vacuous 1.0 of the properties is not printed as a score.
    nothing = evaluate([], [], window_ms=W).format().splitlines()
    assert nothing[3].split() == ["all", "0", "0", "0", "-", "-", "-", "-"]
    one_alarm = evaluate([anomaly("q1", zeitgeist_pb2.SPIKE, 0)], [], window_ms=W)
    row = one_alarm.format().splitlines()[1].split()
    assert row == ["SPIKE", "0", "0", "1", "0.000", "-", "-", "-"]

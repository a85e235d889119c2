"""The model and detector as plain functions, on series shaped like real traffic."""

import dataclasses
import math
import random

from transforms.records.zeitgeist_pb2 import (
    DetectorState,
    EpisodeStatus,
    ModelState,
    ModelUpdate,
)
from transforms.zeitgeist import episodes
from transforms.zeitgeist.confidence import update_confidence
from transforms.zeitgeist.forecast import fold, predictor_in_use
from transforms.zeitgeist.params import DetectorParams, ModelParams

WINDOW = 300_000  # 5 minutes
DAY = 288  # windows
T0 = 1_767_571_200_000  # a midnight, UTC


@dataclasses.dataclass
class Replay:
    """What folding a series window by window gave, per window."""

    deviations: list[float]
    shifts: list[bool]
    alerts: list[int]
    in_use: list[str]
    state: ModelState
    scores: list[float] = dataclasses.field(default_factory=list)


def replay(
    counts,
    model=ModelParams(),
    detector=DetectorParams(),
    window=WINDOW,
    other_predictors=True,
):
    """Fold `counts` window by window, as the pipeline would: each window's
    deviation, new-normal flag, predictor in use and score, and the alert
    windows. `other_predictors=False` leaves `least_deviation` out of the
    updates, as an update from before that field had it."""
    state, detector_state = ModelState(), DetectorState()
    result = Replay([], [], [], [], state)
    for w, count in enumerate(counts):
        start = T0 + w * window
        result.in_use.append(predictor_in_use(state, model, start, window))
        folded = fold(state, model, start, window, count)
        update = ModelUpdate(
            query="q",
            window_start=start,
            window_end=start + window,
            actual=count,
            expected=folded.prediction.expected,
            stddev=folded.prediction.stddev,
            history=folded.prediction.history,
            deviation=folded.prediction.deviation(count),
            new_normal=folded.new_normal,
        )
        if other_predictors and folded.prediction.others:
            update.least_deviation = folded.prediction.least_deviation(count)
        verdict = update_confidence(detector_state, update, detector)
        record = episodes.advance(detector_state, update, verdict, detector)
        result.scores.append(verdict.score)
        result.deviations.append(update.deviation)
        result.shifts.append(folded.new_normal)
        if record is not None and record.status == EpisodeStatus.OPENED:
            result.alerts.append(w)
    return result


def run(counts, model=ModelParams(), detector=DetectorParams()):
    """`replay` at 5-minute windows: deviations, new-normal flags, alerts."""
    folded = replay(counts, model, detector)
    return folded.deviations, folded.shifts, folded.alerts


def test_the_spread_is_learned_from_the_data_at_any_scale():
    rng = random.Random(3)
    # 10^8 per window with 1% noise: far noisier than Poisson (10^4 sd).
    counts = [round(1e8 * (1 + 0.01 * rng.gauss(0, 1))) for _ in range(400)]
    counts[300] = round(counts[300] * 1.15)
    deviations, _, _ = run(counts)
    normal = [abs(d) for w, d in enumerate(deviations) if 50 <= w < 300]
    # Poisson noise at this scale would put these near 100.
    assert sorted(normal)[int(0.95 * len(normal))] < 4.0
    assert deviations[300] > 8.0


def test_daily_seasonality_is_detected_and_predicted():
    # A square wave: 2000 at night, 6800 by day, three days, no noise.
    day = [2000] * 108 + [6800] * 110 + [2000] * 70
    deviations, _, alerts = run(day * 3)
    assert max(abs(d) for d in deviations[2 * DAY :]) < 1.0
    assert not [w for w in alerts if w >= DAY]
    _, _, unseasonal = run(day * 3, ModelParams(seasonality="none"))
    assert [w for w in unseasonal if w >= DAY]


def test_a_level_shift_is_learned_once_not_alarmed_on_forever():
    rng = random.Random(5)
    counts = [100 + rng.randint(-8, 8) for _ in range(100)]
    counts += [400 + rng.randint(-15, 15) for _ in range(300)]
    deviations, shifts, alerts = run(counts, ModelParams(seasonality="none"))
    assert alerts == [101]
    learned = [w for w, shifted in enumerate(shifts) if shifted]
    assert len(learned) == 1 and 100 < learned[0] < 140
    assert max(abs(d) for d in deviations[learned[0] + 1 :]) < 4.0


def test_quiet_stretches_of_zeros_raise_nothing():
    rng = random.Random(7)
    counts = [rng.choice([0, 0, 0, 0, 1, 2]) for _ in range(300)]
    counts[100:200] = [0] * 100
    _, _, alerts = run(counts)
    assert alerts == []


def test_one_burst_alone_does_not_alert_but_two_windows_do():
    base = [50, 52, 48, 51, 49, 50, 53, 47, 50, 51, 49, 50, 52, 48, 50, 49, 51] * 2
    one = list(base)
    one[20] = 5000
    two = list(base)
    two[20:22] = [5000, 5000]
    assert run(one)[2] == []
    assert run(two)[2] == [21]


def noisy(windows, rate=1000, seed=13):
    """Poisson-like counts around `rate`, 5-minute windows, no season."""
    rng = random.Random(seed)
    return [max(0, round(rate + rng.gauss(0, math.sqrt(rate)))) for _ in range(windows)]


NO_SEASON = ModelParams(seasonality="none")
# The CUSUM alone: no lone window, no window beyond the query's extremes.
NO_LONE = DetectorParams(lone_sigma=0.0, extreme_sigma=0.0)
NO_EXTREME = DetectorParams(extreme_sigma=0.0)


def test_a_lone_far_out_window_opens_an_episode_where_past_windows_stayed_close():
    counts = noisy(2 * DAY)
    counts[500] = 2000  # ~ 25 spreads of noise, one window
    folded = replay(counts, NO_SEASON)
    assert abs(folded.deviations[500]) > 10
    assert max(abs(d) for d in folded.deviations[100:500]) < 5
    assert folded.alerts == [500]
    # Without the rule the window is one burst, which the CUSUM ignores.
    assert replay(counts, NO_SEASON, NO_LONE).alerts == []


def test_lone_windows_are_not_far_out_on_a_query_that_often_has_them():
    counts = noisy(2 * DAY)
    bursts = range(40, 2 * DAY, 36)  # every three hours, all alike
    for w in bursts:
        counts[w] = 2000
    folded = replay(counts, NO_SEASON)
    assert all(abs(folded.deviations[w]) > 10 for w in bursts)
    # The first day is the warm-up; after it, the query's own tail holds
    # bursts as far out as these: none is far out for it.
    assert [w for w in folded.alerts if w >= DAY] == []
    # A burst well beyond them still is.
    counts[500] = 4000
    assert 500 in replay(counts, NO_SEASON).alerts


def test_a_young_query_has_no_tail_yet_and_needs_two_windows():
    counts = noisy(DAY // 2)
    counts[100] = 2000
    assert replay(counts, NO_SEASON).alerts == []
    # (Without a warm-up, the range of a few windows is no range: the
    # records rule's margin is left out.)
    no_warmup = DetectorParams(lone_warmup_hours=0.0, extreme_margin=0.0)
    assert replay(counts, NO_SEASON, no_warmup).alerts == [100]


def test_the_tail_forgets_with_its_half_life():
    counts = noisy(4 * DAY)
    counts[350] = 3000
    counts[900] = 2000  # two days later: below the record, above its half
    # 2000 is also where the query has never been: the novel-count rule,
    # left out here, would open an episode at 900 at any half-life.
    lone = DetectorParams(novel_margin=0.0)
    assert replay(counts, NO_SEASON, lone).alerts == [350]
    short = DetectorParams(lone_half_life_hours=12.0, novel_margin=0.0)
    assert replay(counts, NO_SEASON, short).alerts == [350, 900]


def test_a_lone_window_is_judged_online():
    counts = noisy(2 * DAY)
    counts[500] = 2000
    later = list(counts)
    later[501:510] = [4000] * 9
    first, second = replay(counts, NO_SEASON), replay(later, NO_SEASON)
    assert first.scores[:501] == second.scores[:501]
    assert first.alerts[:1] == second.alerts[:1] == [500]


def root_of(count):
    return 2.0 * math.sqrt(count + 0.375)


def count_at(spreads, rate=1000):
    """The count `spreads` spreads of Poisson noise (on the root scale)
    away from `rate`."""
    return round((root_of(rate) / 2 + spreads / 2) ** 2)


def test_a_window_beyond_every_count_the_query_has_had_opens_an_episode():
    counts = noisy(2 * DAY)
    assert max(counts[:500]) < count_at(5)
    counts[500] = count_at(5)  # a new high, 5 spreads out: one window
    folded = replay(counts, NO_SEASON)
    assert 4 < folded.deviations[500] < 6  # below lone_sigma, one window
    assert folded.alerts == [500]
    # The CUSUM and the lone rule alone leave it: one window, not far out.
    assert replay(counts, NO_SEASON, NO_EXTREME).alerts == []


def test_a_window_below_every_count_the_query_has_had_opens_a_dip():
    counts = noisy(2 * DAY)
    assert min(counts[:500]) > count_at(-5)
    counts[500] = count_at(-5)
    folded = replay(counts, NO_SEASON)
    assert -6 < folded.deviations[500] < -4
    assert folded.alerts == [500]
    assert replay(counts, NO_SEASON, NO_EXTREME).alerts == []


def test_a_window_within_the_query_s_past_counts_is_no_extreme():
    counts = noisy(2 * DAY)
    counts[500] = count_at(5)
    # The same count once before, in the first day (the warm-up, where no
    # extreme opens an episode, but the query's highest count is kept).
    counts[200] = count_at(5)
    folded = replay(counts, NO_SEASON)
    assert folded.deviations[500] > 4
    assert folded.alerts == []


def test_a_new_extreme_near_the_model_is_no_alert():
    counts = noisy(2 * DAY)
    counts[500] = count_at(3.5)  # a new high, but within extreme_sigma
    assert max(counts[:500]) < counts[500]
    assert replay(counts, NO_SEASON).alerts == []
    assert replay(counts, NO_SEASON, DetectorParams(extreme_sigma=3.0)).alerts == [500]


def bounded(windows, low=900, high=1100, seed=5):
    """Counts spread evenly over [low, high]: a series with no tail (a
    gauge, a CPU), whose range is narrow for its spread."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(windows)]


def test_a_record_broken_by_a_share_of_the_range_opens_an_episode():
    counts = bounded(2 * DAY)
    counts[500] = 1160  # past the high by 0.3 of the range
    folded = replay(counts, NO_SEASON)
    # Not far out in spreads: the series' spread is wide for its range.
    assert 1 < folded.deviations[500] < 4
    assert folded.alerts == [500]
    assert replay(counts, NO_SEASON, DetectorParams(extreme_margin=0.0)).alerts == []


def test_a_record_low_broken_by_a_share_of_the_range_opens_a_dip():
    counts = bounded(2 * DAY)
    counts[500] = 840
    folded = replay(counts, NO_SEASON)
    assert -4 < folded.deviations[500] < -1
    assert folded.alerts == [500]
    assert replay(counts, NO_SEASON, DetectorParams(extreme_margin=0.0)).alerts == []


def test_a_record_broken_by_less_than_the_margin_is_no_alert():
    counts = bounded(2 * DAY)
    counts[500] = 1130  # past the high by 0.15 of the range
    assert max(counts[:500]) < 1130
    assert replay(counts, NO_SEASON).alerts == []
    wider = DetectorParams(extreme_margin=0.1)
    assert replay(counts, NO_SEASON, wider).alerts == [500]


def with_bursts(windows, burst=2000):
    """`noisy` counts with a burst of `burst` searches every three hours:
    the query has had counts near 1000 and at `burst`, nothing between."""
    counts = noisy(windows)
    for w in range(40, windows, 36):
        counts[w] = burst
    return counts


def after_first_day(alerts):
    """The alerts once the bursts are the query's normal (the second burst,
    on a young query, is an episode)."""
    return [w for w in alerts if w >= DAY]


def test_a_count_where_the_query_has_never_been_opens_an_episode():
    counts = with_bursts(2 * DAY)
    assert counts[500] < 1200
    counts[500] = 1600  # between its usual counts and its bursts
    folded = replay(counts, NO_SEASON)
    # Far from the model, but the bursts keep the lone tail above it, and
    # it breaks no record: only its novelty for the query raises it.
    assert folded.deviations[500] > 10
    assert after_first_day(folded.alerts) == [500]
    without = replay(counts, NO_SEASON, DetectorParams(novel_margin=0.0))
    assert after_first_day(without.alerts) == []
    # The rule belongs to the records': off with them.
    assert after_first_day(replay(counts, NO_SEASON, NO_EXTREME).alerts) == []


def test_a_count_near_one_the_query_has_had_is_not_novel():
    counts = with_bursts(2 * DAY)
    counts[500] = 1970  # 30 searches from its bursts: 3 % of its range
    assert after_first_day(replay(counts, NO_SEASON).alerts) == []
    closer = DetectorParams(novel_margin=0.02)
    assert after_first_day(replay(counts, NO_SEASON, closer).alerts) == [500]


def test_a_count_the_query_had_once_before_is_not_novel():
    counts = with_bursts(2 * DAY)
    counts[300] = counts[500] = 1600  # 300 is after the warm-up
    folded = replay(counts, NO_SEASON)
    assert after_first_day(folded.alerts) == [300]  # the first, not the second


def test_a_young_query_s_counts_are_not_yet_novel():
    counts = with_bursts(DAY // 2)
    counts[100] = 1600
    assert 100 not in replay(counts, NO_SEASON).alerts
    no_warmup = DetectorParams(lone_warmup_hours=0.0, extreme_margin=0.0)
    assert 100 in replay(counts, NO_SEASON, no_warmup).alerts
    not_novel = dataclasses.replace(no_warmup, novel_margin=0.0)
    assert 100 not in replay(counts, NO_SEASON, not_novel).alerts


def test_a_state_without_visited_counts_starts_them_at_its_next_window():
    # A DetectorState written before the visited counts: its first window
    # starts them and is not novel; the first far from it is.
    state = DetectorState(value_high=9000.0, value_low=1000.0)
    params = DetectorParams()
    update = grown_query_window(deviation=5.0)
    assert update_confidence(state, update, params).kind is None
    assert state.HasField("visited_bins")
    update.window_start, update.window_end = T0 + WINDOW, T0 + 2 * WINDOW
    update.actual = 7000
    assert update_confidence(state, update, params).kind == "SPIKE"


def test_a_young_query_s_extremes_are_not_yet_a_record():
    counts = noisy(DAY // 2)
    counts[100] = count_at(5)
    assert replay(counts, NO_SEASON).alerts == []
    # Without the warm-up, the record (margin aside: see above) is judged.
    no_warmup = DetectorParams(lone_warmup_hours=0.0, extreme_margin=0.0)
    assert replay(counts, NO_SEASON, no_warmup).alerts == [100]


def test_a_query_of_a_few_searches_has_no_extremes():
    # At ten searches a window a new record is a few searches away.
    counts = noisy(2 * DAY, rate=10)
    counts[500] = count_at(5, rate=10)
    assert max(counts[:500]) < counts[500]
    assert replay(counts, NO_SEASON).alerts == []
    any_volume = DetectorParams(extreme_min_expected=0.0)
    assert replay(counts, NO_SEASON, any_volume).alerts == [500]


def grown_query_window(deviation):
    """The first window of 5000 searches, against 1000 expected, that a
    detector state sees, on a query with ten days of history."""
    return ModelUpdate(
        query="q",
        window_start=T0,
        window_end=T0 + WINDOW,
        actual=5000,
        expected=1000.0,
        history=10 * DAY,
        deviation=deviation,
    )


def test_a_state_without_extremes_starts_them_at_its_next_window():
    # A DetectorState written before value_high and value_low: its first
    # window sets them and is no record; the next window beyond is.
    state = DetectorState()
    params = DetectorParams()
    update = grown_query_window(deviation=5.0)
    assert update_confidence(state, update, params).kind is None
    assert (state.value_high, state.value_low) == (5000.0, 5000.0)
    update.window_start, update.window_end = T0 + WINDOW, T0 + 2 * WINDOW
    update.actual = 5001
    assert update_confidence(state, update, params).kind == "SPIKE"
    assert state.value_high == 5001.0


def test_extremes_are_judged_online():
    counts = noisy(2 * DAY)
    counts[500] = count_at(5)
    later = list(counts)
    later[501:510] = [count_at(8)] * 9  # higher counts after it change nothing
    first, second = replay(counts, NO_SEASON), replay(later, NO_SEASON)
    assert first.scores[:501] == second.scores[:501]
    assert first.alerts[:1] == second.alerts[:1] == [500]


NO_SURPRISE = DetectorParams(far_surprise=False)


def bursty(days, every=24, width=4):
    """Noisy counts with a burst of `width` windows at 2000 (about 25
    spreads) every `every` windows: bursts that are the query's normal."""
    counts = noisy(days * DAY)
    starts = range(40, days * DAY - width, every)
    for w in starts:
        counts[w : w + width] = [2000] * width
    return counts, starts


def test_bursts_that_are_the_query_s_normal_stop_alerting():
    counts, _ = bursty(4)
    quiet_after = [w for w in replay(counts, NO_SEASON).alerts if w >= 3 * DAY]
    assert quiet_after == []
    # Each burst adds the full clip without the rule: one alert per burst
    # or so, day after day.
    loud_after = [w for w in replay(counts, NO_SEASON, NO_SURPRISE).alerts]
    assert len([w for w in loud_after if w >= 3 * DAY]) >= 10


def test_a_query_whose_windows_stayed_close_keeps_the_full_clip():
    counts = noisy(2 * DAY)
    counts[500:502] = [2000, 2000]  # two windows, beyond the clip
    cusum = DetectorParams(lone_sigma=0.0, extreme_sigma=0.0)
    cusum_without = DetectorParams(
        lone_sigma=0.0, extreme_sigma=0.0, far_surprise=False
    )
    with_rule = replay(counts, NO_SEASON, cusum)
    assert with_rule.alerts == replay(counts, NO_SEASON, cusum_without).alerts
    assert with_rule.alerts == [501]
    assert with_rule.scores == replay(counts, NO_SEASON, cusum_without).scores


def test_the_share_of_far_windows_is_judged_before_the_window_joins():
    params = DetectorParams()
    state = DetectorState(far_share=0.0)
    update = grown_query_window(deviation=50.0)
    # No far window before: the full clip, and the share now counts it.
    update_confidence(state, update, params)
    assert state.spike == params.max_deviation_sigma - params.slack_sigma
    assert state.far_share == 1.0 / params.evidence_memory_windows
    # A share of 1/e: the next far window adds one nat beyond the slack.
    state = DetectorState(far_share=math.exp(-1.0))
    update_confidence(state, update, params)
    assert abs(state.spike - 1.0) < 1e-12


HALF_HOUR = 1_800_000
HALF_HOURS_A_DAY = 48
# Two weekend days a week at 40% of a weekday's traffic.
WEEKEND_FACTOR = 0.4


def weekly_series(weeks, weekend_factor, seed=11):
    """Half-hourly counts: a daily shape (quiet nights, busy days), noisy,
    with the last two days of each week scaled by `weekend_factor`."""
    rng = random.Random(seed)
    counts = []
    for w in range(weeks * 7 * HALF_HOURS_A_DAY):
        day, slot = divmod(w, HALF_HOURS_A_DAY)
        rate = 400 + 1200 * max(0.0, math.sin(math.pi * (slot - 12) / 30))
        if day % 7 >= 5:
            rate *= weekend_factor
        counts.append(max(0, round(rate + rng.gauss(0, 2 * math.sqrt(rate)))))
    return counts


def run_half_hourly(counts, model=ModelParams()):
    """`replay` at half-hour windows, with the predictor used for each window."""
    folded = replay(counts, model, window=HALF_HOUR)
    return folded.in_use, folded.deviations, folded.alerts, folded.state


def weekend(w):
    return (w // HALF_HOURS_A_DAY) % 7 >= 5


def test_a_weekend_dip_is_predicted_by_the_weekly_memory_after_a_few_weeks():
    weeks = 6
    counts = weekly_series(weeks, WEEKEND_FACTOR)
    settled = 4 * 7 * HALF_HOURS_A_DAY  # weeks 5 and 6
    in_use, deviations, alerts, _ = run_half_hourly(counts)
    weekend_windows = [w for w in range(settled, len(counts)) if weekend(w)]
    # The choice follows the tracked errors: a few windows into Saturday the
    # weekly memory has taken over, and it keeps the weekend.
    weekly = [w for w in weekend_windows if in_use[w] == "week"]
    assert len(weekly) > 0.9 * len(weekend_windows)
    assert sorted(abs(deviations[w]) for w in weekly)[len(weekly) // 2] < 1.5
    assert not [w for w in alerts if w >= settled]
    # The daily season alone cannot know the weekend: it alarms on it.
    _, _, daily_alerts, _ = run_half_hourly(counts, ModelParams(seasonality="daily"))
    assert [w for w in daily_alerts if w >= settled and weekend(w)]


def test_a_window_another_predictor_expects_is_not_far_out_for_the_query():
    # Saturday's first windows are far from the daily predictor still in
    # use, every week alike, but the weekly memory expects them.
    counts = weekly_series(6, WEEKEND_FACTOR)
    week = 7 * HALF_HOURS_A_DAY
    settled = 3 * week
    saturdays = {w for w in range(settled, len(counts)) if w % week in (240, 241)}
    folded = replay(counts, window=HALF_HOUR)
    assert max(abs(folded.deviations[w]) for w in saturdays) > 6
    assert not [w for w in folded.alerts if w >= settled]
    # Judged on the predictor in use alone, they alert.
    alone = replay(counts, window=HALF_HOUR, other_predictors=False)
    assert set(alone.alerts) & saturdays


def test_a_series_with_no_weekly_pattern_keeps_the_daily_choice():
    counts = weekly_series(5, weekend_factor=1.0)
    in_use, _, alerts, _ = run_half_hourly(counts)
    later = in_use[2 * 7 * HALF_HOURS_A_DAY :]
    assert later.count("season") > 0.95 * len(later)
    # It alerts as the daily season alone does: while the first days are
    # learned, and at most once after, at 21:00, where the daily shape
    # turns flat at its night floor. The seasonal neighbours (two hours
    # each side at half-hour windows) blur that kink; see
    # `test_the_daily_memory_s_neighbours_make_a_steadier_prediction` for
    # what they buy.
    _, _, daily_alerts, _ = run_half_hourly(counts, ModelParams(seasonality="daily"))
    assert alerts == daily_alerts
    late = [w for w in alerts if w >= 2 * HALF_HOURS_A_DAY]
    assert len(late) <= 1
    assert all(w % HALF_HOURS_A_DAY == 42 for w in late)
    # Without the neighbours, none.
    sharp = ModelParams(seasonal_neighbours=0)
    _, _, sharp_alerts, _ = run_half_hourly(counts, sharp)
    assert not [w for w in sharp_alerts if w >= 2 * HALF_HOURS_A_DAY]


def test_the_weekly_memory_is_bounded_and_never_sees_the_window_it_predicts():
    counts = weekly_series(4, WEEKEND_FACTOR)
    # An hour's slot holds two half-hour windows: alter the second one, so
    # that the slot is partly filled when it is predicted.
    w = 3 * 7 * HALF_HOURS_A_DAY + 21
    altered = list(counts)
    altered[w] = 50 * counts[w]
    params = ModelParams()
    original, changed = ModelState(), ModelState()
    for i, (a, b) in enumerate(zip(counts, altered, strict=True)):
        start = T0 + i * HALF_HOUR
        first = fold(original, params, start, HALF_HOUR, a).prediction
        second = fold(changed, params, start, HALF_HOUR, b).prediction
        if i <= w:
            assert first == second
    assert original.week_roots != changed.week_roots
    # 168 hourly slots over the remembered weeks and one being filled.
    assert len(original.week_roots) == 168 * (params.seasonal_periods + 1)
    assert len(original.season_roots) == HALF_HOURS_A_DAY * params.seasonal_periods


# A model written by the code before the weekly memory existed (8-hour
# windows, seasonality auto, which then meant daily): ten windows of a
# 100/400/200 daily pattern, serialised.
OLD_MODEL = bytes.fromhex(
    "200a2880d89cd7b9333800415acc3b4e9e2339404905c3f581a6e11e405102ba533b6bf2"
    "f83f5a48161ce14c9709344018a38d41660244409f01e7f88e4f3c40161ce14c97093440"
    "18a38d41660244409f01e7f88e4f3c40161ce14c9709344018a38d41660244409f01e7f8"
    "8e4f3c40610000000000000000697f85da49c7340d4071440d0caae072de3f7900000000"
    "00000000"
)
EIGHT_HOURS = 8 * 3_600_000


def test_the_daily_memory_s_neighbours_make_a_steadier_prediction():
    # A smooth daily shape under Poisson noise: three past values of one
    # slot predict it about half as well as the slot's neighbourhood (and
    # the last few windows) do, so the seasonal predictor wins its place.
    rng = random.Random(8)
    rates = [1000 + 600 * math.sin(2 * math.pi * w / DAY) for w in range(5 * DAY)]
    counts = [max(0, round(r + rng.gauss(0, math.sqrt(r)))) for r in rates]

    def last_day(params):
        state, errors, in_use = ModelState(), [], []
        for w, count in enumerate(counts):
            start = T0 + w * WINDOW
            in_use.append(predictor_in_use(state, params, start, WINDOW))
            expected = fold(state, params, start, WINDOW, count).prediction.expected
            errors.append(abs(expected - rates[w]))
        return sum(errors[4 * DAY :]) / DAY, in_use[4 * DAY :].count("season") / DAY

    error, seasonal = last_day(ModelParams())
    sharp_error, sharp_seasonal = last_day(ModelParams(seasonal_neighbours=0))
    assert error < 0.7 * sharp_error
    assert seasonal > 0.95 > sharp_seasonal


def test_a_model_saved_before_the_weekly_memory_loads_and_keeps_working():
    state = ModelState.FromString(OLD_MODEL)
    assert state.history == 10 and len(state.season_roots) == 9
    assert not state.week_roots
    daily = ModelState.FromString(OLD_MODEL)
    for i in range(10, 40):
        start = T0 + i * EIGHT_HOURS
        count = (100, 400, 200)[i % 3]
        auto = fold(state, ModelParams(), start, EIGHT_HOURS, count).prediction
        same = fold(daily, ModelParams(seasonality="daily"), start, EIGHT_HOURS, count)
        # Its daily memory predicts as before; the weekly one is built beside.
        assert auto == same.prediction
        assert abs(auto.deviation(count)) < 1.0
    assert state.history == 40
    assert len(state.week_roots) == 21 * ModelParams().seasonal_periods
    assert ModelState.FromString(state.SerializeToString()) == state


# The deviations' autocorrelation (`max_autocorrelation`).
NO_WHITENING = DetectorParams(max_autocorrelation=0.0)


def learned_state(previous=2.0, previous_start=T0 - WINDOW):
    """A detector state whose query's deviations have a lag-one
    autocorrelation of 0.5 over 1000 pairs, the last window's deviation
    `previous`, judged at `previous_start`."""
    return DetectorState(
        deviation_products=0.5,
        deviation_squares=1.0,
        deviation_pairs=1000,
        previous_deviation=previous,
        previous_deviation_start=previous_start,
    )


def test_the_rules_judge_what_the_previous_deviation_does_not_explain():
    # rho 0.5, capped at 0.3: a deviation of 4 after one of 2 is an
    # innovation of (4 - 0.3 * 2) / sqrt(1 - 0.09) = 3.564 spreads, which
    # the CUSUM adds beyond its slack of 1.
    state = learned_state()
    update_confidence(state, grown_query_window(deviation=4.0), DetectorParams())
    assert abs(state.spike - ((4.0 - 0.6) / math.sqrt(0.91) - 1.0)) < 1e-9
    assert (state.previous_deviation, state.previous_deviation_start) == (4.0, T0)
    assert state.deviation_pairs == 1001
    # Without it, the deviation itself: 4 - 1.
    state = learned_state()
    update_confidence(state, grown_query_window(deviation=4.0), NO_WHITENING)
    assert state.spike == 3.0
    assert state.deviation_pairs == 1000


def test_a_window_after_a_gap_is_judged_on_its_own_deviation():
    # The last judged window is two windows back: nothing to take out, and
    # no pair to learn from.
    state = learned_state(previous_start=T0 - 2 * WINDOW)
    update_confidence(state, grown_query_window(deviation=4.0), DetectorParams())
    assert state.spike == 3.0
    assert state.deviation_pairs == 1000
    assert state.previous_deviation_start == T0


def test_alternating_deviations_are_not_made_larger():
    # A negative autocorrelation is taken as none (rho is at least 0).
    state = learned_state()
    state.deviation_products = -0.5
    update_confidence(state, grown_query_window(deviation=4.0), DetectorParams())
    assert state.spike == 3.0


def wandering(windows, seed, rate=1000):
    """Counts whose rate wanders slowly (an AR(1) at 0.9 per window, in
    spreads of Poisson noise) on top of Poisson noise: a slow drift, no
    episode, that a model following with a lag sees as runs of same-signed
    deviations."""
    rng = random.Random(seed)
    drift, counts = 0.0, []
    for _ in range(windows):
        drift = 0.9 * drift + rng.gauss(0, 0.8)
        spreads = drift + rng.gauss(0, 1.0)
        counts.append(max(0, round((root_of(rate) / 2 + spreads / 2) ** 2)))
    return counts


def test_a_slow_wander_raises_fewer_alerts_once_its_autocorrelation_is_learned():
    series = [wandering(6 * DAY, seed) for seed in range(6)]
    whitened = sum(len(replay(c, NO_SEASON).alerts) for c in series)
    plain = sum(len(replay(c, NO_SEASON, NO_WHITENING).alerts) for c in series)
    assert plain >= 12
    assert whitened <= plain - 4


def test_a_step_is_alerted_as_early_as_without_it():
    # A step of 4 or 6 spreads from window 400: its first innovation is
    # the whole step, and the CUSUM passes the threshold at its second
    # window either way.
    plain = dataclasses.replace(NO_LONE, max_autocorrelation=0.0)
    for spreads in (4, 6):
        counts = noisy(2 * DAY)
        counts[400:430] = [count_at(spreads)] * 30
        assert replay(counts, NO_SEASON, NO_LONE).alerts == [401]
        assert replay(counts, NO_SEASON, plain).alerts == [401]


def test_the_window_after_a_new_normal_is_judged_on_its_own_deviation():
    # The window that ends an excursion carries `new_normal`: the evidence
    # is dropped, and the next window, predicted from the new normal, owes
    # nothing to the old one's deviation of 4.
    state = learned_state()
    shift = grown_query_window(deviation=4.0)
    shift.new_normal = True
    update_confidence(state, shift, DetectorParams())
    assert state.spike == 0.0
    after = grown_query_window(deviation=3.0)
    after.window_start, after.window_end = T0 + WINDOW, T0 + 2 * WINDOW
    update_confidence(state, after, DetectorParams())
    assert state.spike == 2.0
    assert state.previous_deviation_start == T0 + WINDOW


def test_the_daily_predictor_is_not_chosen_in_its_first_window():
    # A million a window all morning, then four million for the rest of the
    # day and the next. At the first window of day two the daily memory
    # holds yesterday's million, the level four million.
    rng = random.Random(9)
    counts = [round(1e6 * (1 + 0.01 * rng.gauss(0, 1))) for _ in range(DAY // 2)]
    counts += [round(4e6 * (1 + 0.01 * rng.gauss(0, 1))) for _ in range(DAY)]
    first_daily = next(w for w in range(DAY, len(counts)) if w % DAY == 0)
    folded = replay(counts)
    # Nothing learned about the daily predictor yet: its spread and error
    # are zero, which is no evidence that it predicts better.
    assert folded.in_use[first_daily] == "level"
    assert abs(folded.deviations[first_daily]) < 6

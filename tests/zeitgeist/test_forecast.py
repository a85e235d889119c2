"""The model and detector as plain functions, on series shaped like real traffic."""

import random

from transforms.records.zeitgeist_pb2 import (
    DetectorState,
    EpisodeStatus,
    ModelState,
    ModelUpdate,
)
from transforms.zeitgeist import episodes
from transforms.zeitgeist.confidence import update_confidence
from transforms.zeitgeist.forecast import fold
from transforms.zeitgeist.params import DetectorParams, ModelParams

WINDOW = 300_000  # 5 minutes
DAY = 288  # windows
T0 = 1_767_571_200_000  # a midnight, UTC


def run(counts, model=ModelParams(), detector=DetectorParams()):
    """Fold `counts` window by window; the deviations, new-normal flags and
    alert windows, as the pipeline would compute them."""
    state, detector_state = ModelState(), DetectorState()
    deviations, shifts, alerts = [], [], []
    for w, count in enumerate(counts):
        start = T0 + w * WINDOW
        folded = fold(state, model, start, WINDOW, count)
        update = ModelUpdate(
            query="q",
            window_start=start,
            window_end=start + WINDOW,
            actual=count,
            expected=folded.prediction.expected,
            stddev=folded.prediction.stddev,
            history=folded.prediction.history,
            deviation=folded.prediction.deviation(count),
            new_normal=folded.new_normal,
        )
        verdict = update_confidence(detector_state, update, detector)
        record = episodes.advance(detector_state, update, verdict, detector)
        deviations.append(update.deviation)
        shifts.append(folded.new_normal)
        if record is not None and record.status == EpisodeStatus.OPENED:
            alerts.append(w)
    return deviations, shifts, alerts


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

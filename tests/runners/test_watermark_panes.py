"""The streaming GroupByKey's fast path for the default trigger
(``WatermarkPanes``) against Beam's general trigger driver
(``TriggerDriverPanes``), batch by batch, over the same random elements and
watermarks, each with its own key-group files on disk."""

from __future__ import annotations

import random
import sqlite3

import pytest
from apache_beam import coders
from apache_beam.transforms import trigger, window
from apache_beam.transforms.core import Windowing
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming, WindowedValue

from runners.spark.micro_batch_task import TaskSpec
from runners.spark.streaming_gbk import TriggerDriverPanes
from runners.spark.streaming_state import KeyGroups
from runners.spark.watermark import MAX_MICROS
from runners.spark.watermark_panes import WatermarkPanes, fires_at_watermark_only

_SECOND = 1_000_000
_KEY_GROUPS = 4


def _coder(window_fn):
    kv = coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])
    return coders.WindowedValueCoder(kv, window_fn.get_window_coder())


def _scenario(seed: int, batches: int = 14):
    """Per batch: (input watermark, output watermark, elements)."""
    rng = random.Random(seed)
    steps, watermark = [], 0
    for _ in range(batches):
        watermark += rng.choice([0, 2, 4, 7]) * _SECOND
        output = watermark - rng.choice([0, 0, 3]) * _SECOND
        elements = [
            (
                rng.choice("abc"),
                rng.randrange(100),
                max(0, watermark + rng.randrange(-50, 15) * _SECOND // 2),
            )
            for _ in range(rng.randrange(0, 9))
        ]
        steps.append((watermark, output, elements))
    # The end of input: every window fires and expires.
    steps.append((MAX_MICROS, MAX_MICROS, []))
    return steps


def _run(panes_of, windowing, state_dir, steps):
    coder = _coder(windowing.windowfn)
    fired, dropped = [], 0
    for batch, (input_wm, output_wm, elements) in enumerate(steps):
        spec = TaskSpec(
            stage="gbk",
            state_dir=str(state_dir),
            key_groups=_KEY_GROUPS,
            batch=batch,
            input_watermark=input_wm,
            output_watermark=output_wm,
            processing_time=batch * _SECOND,
        )
        groups = KeyGroups(spec.state_dir, spec.stage, _KEY_GROUPS, batch)
        for group in range(_KEY_GROUPS):
            groups.group(group)
        grouping = panes_of(windowing, spec, coder, groups)
        for key, value, ts in elements:
            timestamp = Timestamp(micros=ts)
            windows = windowing.windowfn.assign(
                window.WindowFn.AssignContext(timestamp, element=(key, value))
            )
            grouping.add(WindowedValue((key, value), timestamp, windows))
        for pane in grouping.fire():
            (win,) = pane.windows
            key, values = pane.value
            fired.append(
                (batch, key, win, sorted(values), pane.timestamp, pane.pane_info)
            )
        dropped += grouping.dropped_late
        groups.commit()
    return sorted(fired, key=repr), dropped


_STRATEGIES = [
    (window.FixedWindows(10), 0, "DISCARDING", "EOW"),
    (window.FixedWindows(10), 15, "DISCARDING", "EOW"),
    (window.FixedWindows(10), 15, "ACCUMULATING", "EARLIEST"),
    (window.SlidingWindows(10, 5), 8, "ACCUMULATING", "LATEST"),
    (window.SlidingWindows(10, 5), 0, "DISCARDING", "EARLIEST"),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "strategy",
    _STRATEGIES,
    ids=lambda s: f"{type(s[0]).__name__}-{s[1]}s-{s[2]}-{s[3]}",
)
def test_panes_equal_the_general_trigger_drivers(tmp_path, strategy, seed):
    window_fn, lateness, mode, combiner = strategy
    windowing = Windowing(
        window_fn,
        triggerfn=trigger.DefaultTrigger(),
        accumulation_mode=getattr(trigger.AccumulationMode, mode),
        timestamp_combiner=getattr(window.TimestampCombiner, f"OUTPUT_AT_{combiner}"),
        allowed_lateness=Duration(seconds=lateness),
    )
    assert fires_at_watermark_only(windowing)
    steps = _scenario(seed)
    fast = _run(WatermarkPanes, windowing, tmp_path / "fast", steps)
    general = _run(TriggerDriverPanes, windowing, tmp_path / "general", steps)
    assert fast == general
    panes, _ = fast
    assert panes, "the scenario fires no pane at all"


def test_the_scenarios_reach_on_time_late_and_dropped_elements(tmp_path):
    """The comparison above is only as good as the cases it reaches."""
    windowing = Windowing(
        window.FixedWindows(10),
        triggerfn=trigger.DefaultTrigger(),
        allowed_lateness=Duration(seconds=15),
    )
    timings, dropped = set(), 0
    for seed in range(4):
        panes, lost = _run(
            WatermarkPanes, windowing, tmp_path / str(seed), _scenario(seed)
        )
        timings.update(pane[-1].timing for pane in panes)
        dropped += lost
    assert {PaneInfoTiming.ON_TIME, PaneInfoTiming.LATE} <= timings
    assert dropped > 0


def test_expired_windows_leave_no_rows(tmp_path):
    windowing = Windowing(
        window.FixedWindows(10),
        triggerfn=trigger.DefaultTrigger(),
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        allowed_lateness=Duration(seconds=15),
    )
    panes, _ = _run(WatermarkPanes, windowing, tmp_path, _scenario(seed=1))
    assert panes
    rows = {}
    for table in ("state", "timers", "holds"):
        rows[table] = sum(
            sqlite3.connect(tmp_path / f"kg-{group}.sqlite")
            .execute(f"SELECT COUNT(*) FROM {table}")
            .fetchone()[0]
            for group in range(_KEY_GROUPS)
        )
    assert rows == {"state": 0, "timers": 0, "holds": 0}


def test_triggers_and_merging_windows_take_the_general_driver():
    sessions = Windowing(window.Sessions(10))
    early = Windowing(
        window.FixedWindows(10),
        triggerfn=trigger.AfterWatermark(early=trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    )
    assert not fires_at_watermark_only(sessions)
    assert not fires_at_watermark_only(early)

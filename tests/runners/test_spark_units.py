"""Fast unit tests of the runner's pieces that need no SparkContext."""

from __future__ import annotations

import pytest
from apache_beam.coders import coders
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.transforms.userstate import Timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming

from runners.spark.components import decode_all, encode_chunks
from runners.spark.errors import StageFailure, from_spark_exception, summarize
from runners.spark.options import parse_spark_conf
from runners.spark.plan import TimerFamily
from runners.spark.state_store import TimerStore
from runners.spark.watermark import BatchWatermark

EVENT = beam_runner_api_pb2.TimeDomain.EVENT_TIME
PROCESSING = beam_runner_api_pb2.TimeDomain.PROCESSING_TIME
PANE = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, 0)


def _timer(key: str, ts: int, tag: str = "", clear: bool = False) -> Timer:
    return Timer(key, tag, (GlobalWindow(),), clear, Timestamp(ts), Timestamp(ts), PANE)


def _timer_store(all_due: bool = False):
    context = pipeline_context.PipelineContext()
    coder = coders._TimerCoder(coders.StrUtf8Coder(), coders.GlobalWindowCoder())
    coder_id = context.coders.get_id(coder)
    families = [
        TimerFamily("ParDo", "a", coder_id, EVENT),
        TimerFamily("ParDo", "p", coder_id, PROCESSING),
    ]
    return TimerStore(families, context, all_due), coder.get_impl()


@pytest.fixture
def store_and_coder():
    return _timer_store()


def _add(store, impl, family: str, *timers: Timer) -> None:
    for chunk in encode_chunks(timers, impl):
        store.add_encoded("ParDo", family, chunk)


def _fired(store, impl, watermark) -> dict:
    rounds = store.pop_round(watermark)
    return {
        family[1]: [
            (t.user_key, int(t.fire_timestamp.micros // 10**6), t.dynamic_timer_tag)
            for chunk in chunks
            for t in decode_all(chunk, impl)
        ]
        for family, chunks in rounds.items()
    }


def test_last_set_wins_and_clear_removes(store_and_coder):
    store, impl = store_and_coder
    _add(store, impl, "a", _timer("k", 10), _timer("k", 20), _timer("j", 5, "t"))
    _add(store, impl, "a", _timer("j", 0, "t", clear=True))
    assert len(store) == 1
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 20, "")]}
    assert not store.pop_round(MAX_TIMESTAMP)


def test_each_round_fires_only_the_earliest_timers_of_each_key(store_and_coder):
    store, impl = store_and_coder
    _add(store, impl, "a", _timer("k", 30, "x"), _timer("k", 10, "y"), _timer("j", 20))
    _add(store, impl, "p", _timer("k", 1))
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 10, "y"), ("j", 20, "")]}
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 30, "x")]}
    # Processing-time timers come once no event-time timer is due.
    assert _fired(store, impl, MAX_TIMESTAMP) == {"p": [("k", 1, "")]}


def test_all_due_delivers_every_due_timer_in_one_round():
    store, impl = _timer_store(all_due=True)
    _add(store, impl, "a", _timer("k", 30, "x"), _timer("k", 10, "y"), _timer("j", 20))
    _add(store, impl, "p", _timer("k", 1))
    due_by_25 = {"a": [("k", 10, "y"), ("j", 20, "")]}
    assert _fired(store, impl, Timestamp(25)) == due_by_25
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 30, "x")]}
    assert _fired(store, impl, MAX_TIMESTAMP) == {"p": [("k", 1, "")]}


def test_a_reset_timer_fires_once_at_its_new_time(store_and_coder):
    store, impl = store_and_coder
    _add(store, impl, "a", _timer("k", 10), _timer("k", 40, "late"))
    _add(store, impl, "a", _timer("k", 50))  # moves the untagged timer past 40
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 40, "late")]}
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 50, "")]}
    assert not store.pop_round(MAX_TIMESTAMP)


def test_a_timer_set_between_rounds_fires_before_later_ones(store_and_coder):
    store, impl = store_and_coder
    _add(store, impl, "a", _timer("k", 10), _timer("k", 90, "end"))
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 10, "")]}
    # As a callback of the timer at 10 would: the next window's timer.
    _add(store, impl, "a", _timer("k", 20))
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 20, "")]}
    assert _fired(store, impl, MAX_TIMESTAMP) == {"a": [("k", 90, "end")]}
    assert len(store) == 0


def test_event_time_timers_wait_for_the_watermark(store_and_coder):
    store, impl = store_and_coder
    _add(store, impl, "a", _timer("k", 10))
    watermark = BatchWatermark()
    assert watermark.current() == MIN_TIMESTAMP
    assert not store.pop_round(watermark.current())
    watermark.input_exhausted()
    assert _fired(store, impl, watermark.current()) == {"a": [("k", 10, "")]}


SDK_ERROR = """Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in process
  File "/home/u/job.py", line 3, in parse
    raise ValueError("bad")
ValueError: bad

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/apache_beam/runners/worker/sdk_worker.py", line 1, in _execute
    response = task()
  File "/home/u/job.py", line 3, in parse
    raise ValueError("bad")
ValueError: bad [while running 'Parse']
"""


def test_summarize_keeps_exception_transform_and_user_frames():
    record = summarize("stage 3", SDK_ERROR)
    assert record["type"] == "ValueError"
    assert record["message"] == "bad [while running 'Parse']"
    assert record["transform"] == "Parse"
    assert record["user_frames"] == [
        'File "/home/u/job.py", line 3, in parse',
        '  raise ValueError("bad")',
    ]


def test_error_travels_through_a_spark_exception_text():
    relayed = RuntimeError(
        f"py4j JVM noise\n{StageFailure('stage 3', SDK_ERROR)}\nat ..."
    )
    error = from_spark_exception(relayed)
    assert isinstance(error, ValueError)
    assert str(error).startswith("ValueError: bad [while running 'Parse']")
    assert error.transform == "Parse"
    assert from_spark_exception(RuntimeError("no record")) is None


def test_spark_conf_pairs():
    assert parse_spark_conf(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError):
        parse_spark_conf(["=1"])

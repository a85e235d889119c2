"""The live generator: a stream at the asked rate, played on the wall clock."""

import json
import time

import pytest

from testing.live_player import LivePlayer
from testing.zeitgeist_live import live_stream, stream_feed


def test_the_stream_has_the_asked_rate_and_starts_at_the_current_window():
    now_ms = 1_767_571_234_567
    stream = live_stream(
        rate=500, window_ms=10_000, minutes=10, num_queries=20, seed=1, now_ms=now_ms
    )
    assert stream.spec.start_ms == now_ms - now_ms % 10_000
    per_second = stream.counts.sum() / (10 * 60)
    assert 450 < per_second < 550
    assert stream.episodes, "minutes of live stream must hold episodes"
    assert max(stream.delay_ms) <= 1_000  # the disorder a follower allows


def test_a_rate_too_low_for_the_queries_is_refused():
    with pytest.raises(ValueError, match="too low"):
        live_stream(rate=1, window_ms=1_000, minutes=1, num_queries=100, seed=1)


def test_the_player_writes_each_record_once_when_its_arrival_time_comes(tmp_path):
    stream = live_stream(
        rate=200,
        window_ms=1_000,
        minutes=0.05,
        num_queries=5,
        seed=2,
        warmup_windows=1,
    )
    feed = stream_feed(stream, tmp_path / "inbox")
    player = LivePlayer([feed], tick_seconds=0.1).start()
    deadline = time.monotonic() + 30
    while not player.finished and time.monotonic() < deadline:
        time.sleep(0.1)
    player.stop()
    records = [
        (json.loads(line), path.stat().st_mtime)
        for path in sorted((tmp_path / "inbox").glob("live-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [r["record_id"] for r, _ in records] == [
        f"{stream.seed}-{i}" for i in stream.record_index.tolist()
    ]
    # No record is written before its arrival time.
    arrivals = stream.arrival_ms.tolist()
    assert all(
        written * 1000 >= arrival - 5
        for (_, written), arrival in zip(records, arrivals, strict=True)
    )
    assert len(list((tmp_path / "inbox").glob("live-*.jsonl"))) > 1

"""The live generator: a stream at the asked rate, played on the wall clock."""

import json
import time

import pytest

from testing.live_player import Feed, LivePlayer, clear_played, next_file_number
from testing.photon_live import live_logs
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


def test_a_player_started_again_numbers_its_files_on_and_rewrites_none(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "live-00000007.jsonl").write_text("earlier\n")
    (inbox / "notes.jsonl").write_text("not played\n")
    records = ["a", "b"]

    def write(path, part):
        path.write_text("".join(r + "\n" for r in records[part]))

    feed = Feed(inbox, [0, 0], write)
    player = LivePlayer([feed], tick_seconds=0.05).start()
    deadline = time.monotonic() + 10
    while not player.finished and time.monotonic() < deadline:
        time.sleep(0.05)
    player.stop()
    assert (inbox / "live-00000007.jsonl").read_text() == "earlier\n"
    assert (inbox / "live-00000008.jsonl").read_text() == "a\nb\n"
    assert next_file_number(inbox) == 9

    (inbox / ".live-00000009.jsonl").write_text("half written")
    assert clear_played(inbox) == 3
    assert sorted(p.name for p in inbox.iterdir()) == ["notes.jsonl"]
    assert next_file_number(inbox) == 0


def test_photon_logs_of_a_resumed_run_have_ids_of_their_own():
    first = live_logs(rate=50, minutes=0.1, seed=3, now_ms=0)
    later = live_logs(rate=50, minutes=0.1, seed=3, now_ms=0, id_prefix="r9-")
    assert {c.click_id for c in later.clicks} == {
        "r9-" + c.click_id for c in first.clicks
    }
    assert all(q.query_id.startswith("r9-") for q in later.queries)
    assert all(q.record_id.startswith("r9-") for q in later.queries)

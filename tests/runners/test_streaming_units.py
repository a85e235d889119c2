"""Fast unit tests of streaming's pieces that need no SparkContext: the
key-group store and its undo log, the watermark manager, the checkpoint
directory, what side inputs hold from batch to batch and the TestStream
script."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms.window import IntervalWindow
from apache_beam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
)

from runners.spark.checkpoint import (
    CheckpointDir,
    CheckpointInUse,
    CheckpointMismatch,
    CheckpointUnusable,
)
from runners.spark.components import add_windowed_coders, decode_all, encode_chunks
from runners.spark.durable_store import (
    EVENT_DOMAIN,
    PROCESSING_DOMAIN,
    KeyGroupStore,
    StateAheadOfCheckpoint,
)
from runners.spark.micro_batch_task import EarlyWatermark, TaskSpec
from runners.spark.side_contents import SideContents
from runners.spark.side_expiry import Horizon
from runners.spark.streaming_state import KeyGroups
from runners.spark.test_stream_source import TEST_STREAM_URN, ScriptedStream
from runners.spark.watermark import MAX_MICROS, MIN_MICROS
from runners.spark.watermark_manager import WatermarkManager
from testing import small_disk


def _write_batch(path, batch, key=b"k", value=b"v"):
    store = KeyGroupStore(path, batch)
    store.append(key, value)
    store.set_timer(b"t-" + value, b"owner", EVENT_DOMAIN, 100 + batch, 50, b"")
    store.commit()


def _contents(path, batch):
    store = KeyGroupStore(path, batch)
    data = store.read(b"k")
    summary = store.summary("s", 0)
    store.abandon()
    return data, summary


def test_a_replayed_batch_starts_from_the_state_before_its_first_attempt(tmp_path):
    path = tmp_path / "kg-0.sqlite"
    _write_batch(path, 0, value=b"zero")
    _write_batch(path, 1, value=b"one")  # committed by the task, not the driver
    # Batch 1 runs again: it must see batch 0's state only.
    data, summary = _contents(path, 1)
    assert data == [b"zero"]
    assert summary.next_event == 100


def test_a_committed_batch_is_kept_when_the_next_one_starts(tmp_path):
    path = tmp_path / "kg-0.sqlite"
    _write_batch(path, 0, value=b"zero")
    _write_batch(path, 1, value=b"one")
    data, summary = _contents(path, 2)
    assert data == [b"zero", b"one"]
    assert (summary.next_event, summary.hold) == (100, 50)


def test_a_failed_task_leaves_the_group_as_it_found_it(tmp_path):
    path = tmp_path / "kg-0.sqlite"
    _write_batch(path, 0, value=b"zero")
    store = KeyGroupStore(path, 1)
    store.clear(b"k")
    store.delete_timer(b"t-zero")
    store.abandon()
    data, summary = _contents(path, 1)
    assert data == [b"zero"]
    assert summary.next_event == 100


def test_a_group_ahead_of_the_checkpoint_is_refused(tmp_path):
    path = tmp_path / "kg-0.sqlite"
    _write_batch(path, 5)
    with pytest.raises(StateAheadOfCheckpoint, match="batch 5"):
        KeyGroupStore(path, 3)


def test_a_damaged_key_group_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "kg-0.sqlite"
    _write_batch(path, 0)
    data = bytearray(path.read_bytes())
    data[:100] = b"\xff" * 100  # the SQLite header, garbled
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointUnusable, match=f"{path} cannot be opened"):
        KeyGroupStore(path, 1)


def test_a_key_group_file_damaged_past_its_first_pages_is_named_when_read(tmp_path):
    # Opening reads the header and the schema only: damage further in showed
    # up later, in a Spark task, as "database disk image is malformed", a
    # traceback that named no file.
    path = tmp_path / "kg-0.sqlite"
    store = KeyGroupStore(path, 0)
    keys = [b"k%d" % i for i in range(2000)]
    for key in keys:
        store.append(key, b"v" * 200)
    store.commit()
    with open(path, "r+b") as file:
        file.seek(path.stat().st_size // 2)
        file.write(bytes(range(256)) * 32)  # two pages of a B-tree, garbled
    store = KeyGroupStore(path, 1)
    damaged = f"{path} cannot be read \\(database disk image is malformed\\)"
    with pytest.raises(CheckpointUnusable, match=damaged):
        for key in keys:
            store.read(key)
    with pytest.raises(CheckpointUnusable, match=damaged):
        store.append(b"k", b"after")  # no write on a file found damaged
    store.abandon()


def test_a_full_disk_fails_a_key_group_write_naming_the_file(small_disk_dir):
    disk = small_disk_dir
    # Before, "sqlite3.OperationalError: database or disk is full" from a
    # Spark task reached the command as a traceback naming no file.
    path = disk / "kg-0.sqlite"
    _write_batch(path, 0, value=b"zero")
    store = KeyGroupStore(path, 1)
    store.append(b"k", b"one")
    filler = small_disk.fill(disk)
    refused = f"{path} cannot be written \\(database or disk is full\\)"
    with pytest.raises(CheckpointUnusable, match=refused):
        # Beyond SQLite's page cache: spilled to the log by the statement.
        store.append(b"k", b"x" * 600_000)
    filler.unlink()
    # SQLite rolled the batch back: a write now would commit alone, outside
    # it, and no replay could undo it. The store refuses it instead.
    with pytest.raises(CheckpointUnusable, match=refused):
        store.append(b"k", b"after")
    store.abandon()
    # Space freed, the batch runs again from batch 0's state.
    assert _contents(path, 1)[0] == [b"zero"]
    _write_batch(path, 1, value=b"one")
    assert _contents(path, 2)[0] == [b"zero", b"one"]


def test_a_batch_whose_commit_filled_the_disk_is_replayed_whole(small_disk_dir):
    disk = small_disk_dir
    # A task commits its groups one by one: group 0 commits, then the disk
    # is full for group 1's (the log gets its pages at the commit). The
    # task fails in one error naming group 1's file; the replay undoes
    # group 0's commit, so no group holds the failed batch twice.
    groups = KeyGroups(str(disk), "s", 2, 0)
    for group in (0, 1):
        groups.group(group).append(b"k", b"zero")
    groups.commit()
    groups = KeyGroups(str(disk), "s", 2, 1)
    groups.group(0).append(b"k", b"one")
    groups.group(1).append(b"k", b"y" * 150_000)  # within the page cache
    # Room for group 0's few pages, not for group 1's.
    filler = small_disk.fill(disk, leave=64 * 1024)
    with pytest.raises(CheckpointUnusable, match=f"{disk / 'kg-1.sqlite'} cannot be"):
        groups.commit()
    groups.abandon()  # group 0 is closed already; before, this raised
    filler.unlink()
    replay = KeyGroups(str(disk), "s", 2, 1)
    assert [replay.group(g).read(b"k") for g in (0, 1)] == [[b"zero"], [b"zero"]]
    replay.group(0).append(b"k", b"one")
    replay.commit()
    after = KeyGroups(str(disk), "s", 2, 2)
    assert after.group(0).read(b"k") == [b"zero", b"one"]
    after.abandon()


def test_due_timers_come_event_time_first_then_in_fire_order(tmp_path):
    store = KeyGroupStore(tmp_path / "kg-0.sqlite", 0)
    store.set_timer(b"p", b"o", PROCESSING_DOMAIN, 5, 5, b"")
    store.set_timer(b"late", b"o", EVENT_DOMAIN, 30, 30, b"")
    store.set_timer(b"early", b"o", EVENT_DOMAIN, 20, 20, b"")
    assert store.earliest_due(25, 10).ident == b"early"
    store.delete_timer(b"early")
    assert store.earliest_due(25, 10).ident == b"p"  # 30 is not due at 25
    assert store.earliest_due(25, 4) is None
    store.abandon()


def test_input_watermark_is_the_minimum_of_the_inputs_and_holds_propagate():
    flatten = beam_runner_api_pb2.PTransform(
        unique_name="flatten", inputs={"a": "A", "b": "B"}, outputs={"o": "F"}
    )
    stage = beam_runner_api_pb2.PTransform(
        unique_name="stage", inputs={"i": "F"}, outputs={"o": "S"}
    )
    sources = [
        beam_runner_api_pb2.PTransform(unique_name="a", outputs={"o": "A"}),
        beam_runner_api_pb2.PTransform(unique_name="b", outputs={"o": "B"}),
    ]
    manager = WatermarkManager([stage, flatten, *sources])
    marks = manager.compute({"A": 40, "B": 70}, holds={"stage": 25})
    assert marks.inputs["flatten"] == 40
    assert marks.inputs["stage"] == 40
    assert marks.pcollections["S"] == 25  # held by the stage's timers
    released = manager.compute({"A": MAX_MICROS, "B": MAX_MICROS}, holds={})
    assert released.pcollections["S"] == MAX_MICROS


def test_checkpoint_refuses_another_pipeline_and_keeps_the_last_commit(tmp_path):
    checkpoint = CheckpointDir(tmp_path)
    checkpoint.bind({"keyed_stages": ["a"], "key_groups": 16})
    checkpoint.write_commit(0, {"n": 0})
    checkpoint.write_commit(1, {"n": 1})
    assert checkpoint.last_commit() == (1, {"n": 1})
    checkpoint.prune(1)
    assert checkpoint.last_commit() == (1, {"n": 1})
    with pytest.raises(CheckpointMismatch, match="another pipeline"):
        CheckpointDir(tmp_path).bind({"keyed_stages": ["a"], "key_groups": 8})


def test_a_checkpoint_directory_that_cannot_be_made_is_unusable():
    # An OSError traceback from the streaming job before.
    with pytest.raises(CheckpointUnusable, match="/proc/no-such/ck cannot be created"):
        CheckpointDir("/proc/no-such/ck")


def test_a_damaged_checkpoint_record_is_refused_naming_it(tmp_path):
    # Truncated, as a copy cut short or a disk that lost a block leaves it:
    # where the job stopped cannot be told, and a guess replays or skips.
    checkpoint = CheckpointDir(tmp_path)
    job = {"keyed_stages": ["a"], "key_groups": 16}
    checkpoint.bind(job)
    checkpoint.write_offsets(3, {"n": 3})
    checkpoint.write_commit(3, {"n": 3})
    checkpoint.write_side_inputs(3, {"side": [b"x"]})
    checkpoint.write_side_firings(3, {"side": {b"w": (frozenset([0]), [b"x"])}})
    for record in ("job.json", "offsets/3.json", "commits/3.json"):
        path = tmp_path / record
        path.write_text(path.read_text()[:-4])
    for pickled in ("side_inputs/3.pickle", "side_firings/3.pickle"):
        side = tmp_path / pickled
        side.write_bytes(side.read_bytes()[:-4])
    with pytest.raises(CheckpointUnusable, match=f"{tmp_path / 'job.json'} cannot"):
        checkpoint.bind(job)
    with pytest.raises(CheckpointUnusable, match="offsets/3.json cannot be read"):
        checkpoint.read_offsets(3)
    with pytest.raises(CheckpointUnusable, match="commits/3.json cannot be read"):
        checkpoint.last_commit()
    with pytest.raises(CheckpointUnusable, match="inputs/3.pickle cannot be read"):
        checkpoint.read_side_inputs(3)
    with pytest.raises(CheckpointUnusable, match="firings/3.pickle cannot be read"):
        checkpoint.read_side_firings(3)


def test_a_checkpoint_without_its_job_record_is_refused(tmp_path):
    # Before, job.json was written anew from the running pipeline: a changed
    # pipeline then resumed on state kept under another.
    checkpoint = CheckpointDir(tmp_path)
    job = {"keyed_stages": ["a"], "key_groups": 16}
    checkpoint.bind(job)
    checkpoint.write_commit(0, {"n": 0})
    (tmp_path / "job.json").unlink()
    with pytest.raises(CheckpointUnusable, match="job.json is missing"):
        CheckpointDir(tmp_path).bind({"keyed_stages": ["a"], "key_groups": 8})


def test_a_checkpoint_record_that_cannot_be_written_is_named(tmp_path):
    (tmp_path / "commits").write_text("")  # not a directory: mkdir fails
    (tmp_path / "side_inputs").write_text("")
    with pytest.raises(CheckpointUnusable, match="commits/0.json cannot be written"):
        CheckpointDir(tmp_path).write_commit(0, {"n": 0})
    with pytest.raises(CheckpointUnusable, match="0.pickle cannot be written"):
        CheckpointDir(tmp_path).write_side_inputs(0, {"side": [b"x"]})


def test_a_checkpoint_held_by_a_running_job_is_refused_to_another(tmp_path):
    running = CheckpointDir(tmp_path)
    running.claim()
    with pytest.raises(CheckpointInUse, match=f"process {os.getpid()}"):
        CheckpointDir(tmp_path).claim()
    running.release()
    CheckpointDir(tmp_path).claim()  # free once the first job let it go


def test_a_checkpoint_held_by_a_killed_job_is_free(tmp_path):
    # A driver killed with SIGKILL never releases: the kernel does.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from runners.spark.checkpoint import CheckpointDir\n"
            "CheckpointDir(sys.argv[1]).claim()\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointInUse, match=f"process {holder.pid}"):
            CheckpointDir(tmp_path).claim()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    CheckpointDir(tmp_path).claim()


def test_claiming_a_checkpoint_removes_writes_a_killed_job_left_unfinished(
    tmp_path,
):
    written = CheckpointDir(tmp_path)
    written.bind({"keyed_stages": []})
    written.write_offsets(3, {"batch": 3})
    written.write_commit(3, {"batch": 3})
    written.write_side_inputs(3, {"side": [b"x"]})
    written.write_side_firings(3, {})
    # What a kill between a record's write and its rename leaves.
    leftovers = [
        tmp_path / ".job.json.k2x9",
        tmp_path / "offsets" / ".4.json.a1b2",
        tmp_path / "commits" / ".4.json.c3d4",
        tmp_path / "side_inputs" / ".4.pickle.e5f6",
        tmp_path / "side_firings" / ".4.pickle.g7h8",
    ]
    for leftover in leftovers:
        leftover.write_text("half a record")

    resumed = CheckpointDir(tmp_path)
    resumed.claim()

    assert [p for p in leftovers if p.exists()] == []
    assert resumed.last_commit() == (3, {"batch": 3})
    assert resumed.read_offsets(3) == {"batch": 3}
    assert resumed.read_side_inputs(3) == {3: {"side": [b"x"]}}
    resumed.bind({"keyed_stages": []})  # job.json kept: the same job binds


def test_only_the_newest_committed_side_firings_are_kept(tmp_path):
    checkpoint = CheckpointDir(tmp_path)
    for batch in (1, 2, 3):
        checkpoint.write_side_firings(batch, {"side": batch})
    checkpoint.write_side_inputs(3, {"side": [b"x"]})
    checkpoint.prune(2)  # batch 2 committed: 1 is superseded
    assert sorted(p.name for p in (tmp_path / "side_firings").iterdir()) == [
        "2.pickle",
        "3.pickle",
    ]
    # Batch 3 never committed: a restart drops what its attempt wrote, which
    # a replay may not write again.
    checkpoint.drop_uncommitted_side_inputs(2)
    assert checkpoint.read_side_firings(5) == {"side": 2}
    assert checkpoint.read_side_inputs(5) == {}
    checkpoint.drop_uncommitted_side_inputs(None)  # nothing committed
    assert checkpoint.read_side_firings(5) is None


def test_a_shrunk_batch_stores_what_is_left_of_its_side_inputs(tmp_path):
    checkpoint = CheckpointDir(tmp_path)
    checkpoint.write_side_inputs(1, {"side": [b"x", b"y"]})
    checkpoint.write_side_inputs(2, {"side": [b"z"]})
    checkpoint.shrink_side_inputs(1, {"side": [b"y"]})
    checkpoint.shrink_side_inputs(2, {})  # all its windows expired
    assert checkpoint.read_side_inputs(5) == {1: {"side": [b"y"]}}
    assert not (tmp_path / "side_inputs" / "2.pickle").exists()


_SIDE_CODER = coders.WindowedValueCoder(
    coders.StrUtf8Coder(), coders.coders.IntervalWindowCoder()
)
_WINDOWS = [IntervalWindow(0, 10), IntervalWindow(10, 20)]


def _side_chunks(*elements: tuple[str, int, int | None]) -> list[bytes]:
    """(value, window number, pane index or None for no firing) each."""
    return list(
        encode_chunks(
            (
                WindowedValue(
                    value,
                    _WINDOWS[window].start,
                    (_WINDOWS[window],),
                    PANE_INFO_UNKNOWN
                    if pane is None
                    else PaneInfo(pane == 0, False, PaneInfoTiming.EARLY, pane, -1),
                )
                for value, window, pane in elements
            ),
            _SIDE_CODER.get_impl(),
        )
    )


def _side_values(contents: SideContents) -> dict[str, list]:
    return {
        pc: sorted(
            (wv.value, _WINDOWS.index(wv.windows[0]))
            for chunk in chunks
            for wv in decode_all(chunk, _SIDE_CODER.get_impl())
        )
        for pc, chunks in contents.chunks().items()
    }


def test_side_contents_keep_unfired_elements_and_each_windows_latest_firing():
    contents = SideContents()
    coder_of = {"side": _SIDE_CODER}.__getitem__
    fired = contents.fold(
        0,
        {"side": _side_chunks(("u1", 0, None), ("a", 0, 0), ("p", 1, 0))},
        coder_of,
    )
    assert (len(contents.stored(0)["side"]), fired) == (1, True)
    # A newer pane of window 0 replaces its firing; window 1 keeps its own.
    contents.fold(1, {"side": _side_chunks(("u2", 0, None), ("b", 0, 1))}, coder_of)
    # The same pane continued (emitted over two batches) joins it.
    contents.fold(2, {"side": _side_chunks(("c", 0, 1))}, coder_of)
    assert _side_values(contents) == {
        "side": [("b", 0), ("c", 0), ("p", 1), ("u1", 0), ("u2", 0)]
    }
    assert contents.fold(3, {"side": _side_chunks(("u3", 1, None))}, coder_of) is False
    assert contents.stored(2) == {}

    # A checkpoint of before the firings were stored apart: its batches hold
    # fired elements, folded in order to the latest firing.
    old = SideContents.restored(
        {
            0: {"side": _side_chunks(("a", 0, 0))},
            1: {"side": _side_chunks(("b", 0, 1))},
        },
        None,
        coder_of,
    )
    assert _side_values(old) == {"side": [("b", 0)]}
    restored = SideContents.restored(
        {0: {"side": _side_chunks(("u1", 0, None))}}, contents.firings(), coder_of
    )
    assert _side_values(restored) == {"side": [("b", 0), ("c", 0), ("p", 1), ("u1", 0)]}


def _horizon(micros: int) -> Horizon:
    return Horizon(micros, _SIDE_CODER.window_coder)


def test_side_contents_drop_expired_windows_and_what_batches_stored_of_them():
    # Before, every window of a side input was kept for ever: a stream in
    # fixed windows grew on the driver and in the checkpoint without end.
    contents = SideContents()
    coder_of = {"side": _SIDE_CODER}.__getitem__
    contents.fold(0, {"side": _side_chunks(("u0", 0, None), ("f0", 0, 0))}, coder_of)
    contents.fold(
        1,
        {"side": _side_chunks(("v0", 0, None), ("u1", 1, None), ("f1", 1, 0))},
        coder_of,
    )
    window_0_end = _WINDOWS[0].end.micros
    assert contents.expire({"side": _horizon(window_0_end)}) is False
    assert contents.shrunk() == {}
    # Past its end: window 0 goes, its firing with it.
    assert contents.expire({"side": _horizon(window_0_end + 1)}) is True
    assert _side_values(contents) == {"side": [("f1", 1), ("u1", 1)]}
    shrunk = contents.shrunk()
    assert shrunk[0] == {}  # batch 0 stored window 0 only: its file goes
    assert [
        wv.value
        for chunk in shrunk[1]["side"]
        for wv in decode_all(chunk, _SIDE_CODER.get_impl())
    ] == ["u1"]
    assert contents.shrunk() == {}
    # Late elements of an expired window go at the next expiry, as the
    # batch that brought them is stored.
    contents.fold(2, {"side": _side_chunks(("late", 0, None))}, coder_of)
    contents.expire({"side": _horizon(window_0_end + 1)})
    assert contents.stored(2) == {}
    assert _side_values(contents) == {"side": [("f1", 1), ("u1", 1)]}


def test_checkpoint_of_an_earlier_layout_is_refused(tmp_path):
    # Written before stages were named by their sorted steps (layout 2).
    (tmp_path / "job.json").write_text(
        '{"keyed_stages": [], "key_groups": 16, "layout": 2}'
    )
    with pytest.raises(CheckpointMismatch, match="layout: recorded 2, this run 6"):
        CheckpointDir(tmp_path).bind({"keyed_stages": [], "key_groups": 16})


def test_test_stream_steps_take_one_element_event_and_the_watermark_after_it():
    pipeline = beam.Pipeline()
    _ = pipeline | beam.testing.test_stream.TestStream().add_elements(
        [1, 2]
    ).add_elements([3]).advance_watermark_to(10).advance_processing_time(
        5
    ).add_elements([4])
    proto = pipeline.to_runner_api()
    components = proto.components
    windowed = add_windowed_coders(components)
    transform = next(
        t for t in components.transforms.values() if t.spec.urn == TEST_STREAM_URN
    )
    script = ScriptedStream(transform, components.SerializeToString(), windowed)
    (out,) = transform.outputs.values()
    first = script.next_step(0)
    assert (first.start, first.end) == (0, 1)  # an element event is a bundle
    second = script.next_step(1)
    assert (second.end, second.element_count) == (3, 1)  # and its watermark
    assert script.watermarks(0)[out] == MIN_MICROS
    assert script.watermarks(3)[out] == 10_000_000
    clock = script.next_step(3)
    assert (clock.end, clock.advance_processing_micros) == (4, 5_000_000)
    assert script.processing_time(4) == 5_000_000
    last = script.next_step(5)  # after the last event: every watermark to +inf
    assert last.end == 6 and script.done(6)
    assert script.watermarks(6)[out] == MAX_MICROS


def _task(input_watermark: int, early=None) -> TaskSpec:
    return TaskSpec(
        stage="s",
        state_dir="unused",
        key_groups=1,
        batch=3,
        input_watermark=input_watermark,
        output_watermark=input_watermark,
        processing_time=0,
        early=early,
    )


def test_a_stage_takes_the_watermark_its_source_left_in_the_same_batch(tmp_path):
    (tmp_path / "0").write_text("700")
    (tmp_path / "1").write_text("900")
    early = EarlyWatermark(without_source=800, report_dir=str(tmp_path), reports=2)
    # The smallest report, below what the rest of the pipeline allows.
    assert _task(100, early).with_early_watermark().input_watermark == 700
    early = EarlyWatermark(without_source=650, report_dir=str(tmp_path), reports=2)
    assert _task(100, early).with_early_watermark().input_watermark == 650
    # Never lower than planned, and unchanged while a report is missing.
    assert _task(750, early).with_early_watermark().input_watermark == 750
    missing = EarlyWatermark(without_source=800, report_dir=str(tmp_path), reports=3)
    assert _task(100, missing).with_early_watermark().input_watermark == 100


def test_a_watermark_report_the_disk_refuses_leaves_the_planned_watermark(
    small_disk_dir,
):
    # It failed the source's task, its state already committed, in a
    # traceback that named no file.
    reports = small_disk_dir / "reports"
    reports.mkdir()
    source = dataclasses.replace(_task(100), report_dir=str(reports))
    source.report_watermark([], partition=0)  # room left: reported
    assert (reports / "0").read_text() == str(MAX_MICROS)
    small_disk.fill(small_disk_dir)
    source.report_watermark([], partition=1)
    assert sorted(p.name for p in reports.iterdir()) == ["0"]
    early = EarlyWatermark(without_source=800, report_dir=str(reports), reports=2)
    assert _task(100, early).with_early_watermark().input_watermark == 100

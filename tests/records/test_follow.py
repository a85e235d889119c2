"""FollowRecords: files read once as they arrive, a watermark from event
times, and a drain that reads what is there. The source runs on this
project's SparkRunner in streaming, over real files in a real directory."""

import bz2
import collections
import concurrent.futures
import gzip
import json
import logging
import lzma
import os
import pickle
import time

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.window import FixedWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from runners.spark import SparkRunner
from testing import followed_polls
from transforms.millwheel.event_time import to_millis, to_timestamp
from transforms.records import follow as follow_module
from transforms.records.after_read import AfterRead
from transforms.records.follow import FollowSearchQueries, FollowSettings
from transforms.records.followed_files import (
    FileEnd,
    FileListing,
    FileVersion,
    FollowedFiles,
    FollowedFilesTracker,
)
from transforms.records.injector_watermark import InjectorState, InjectorWatermark
from transforms.records.readers import DEAD_LETTERS, RECORDS

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z
MINUTE = 60_000


def _json_lines(name: str, times: list[int]) -> str:
    return "".join(
        json.dumps({"query": "q", "event_time": t, "record_id": f"{name}-{i}"}) + "\n"
        for i, t in enumerate(times)
    )


def _drop(directory, name: str, times: list[int], extra: str = "") -> None:
    """Writes a JSON Lines file under a hidden name, then renames it into
    place, as the follow mode asks of writers."""
    hidden = directory / f".{name}"
    hidden.write_text(_json_lines(name, times) + extra)
    hidden.rename(directory / name)


# -- the restriction and the watermark, without a runner ----------------------


def _file(path: str, size: int = 10, last_updated: float = 1.0) -> FileVersion:
    return FileVersion(path, size, last_updated)


def test_a_checkpoint_remembers_the_files_read_and_forgets_the_files_gone():
    a, b, c, gone = _file("/d/a"), _file("/d/b"), _file("/d/c"), _file("/d/gone")
    tracker = FollowedFilesTracker(FollowedFiles(frozenset({a, gone})))
    assert tracker.try_claim(FileListing(frozenset({a, b, c})))
    assert tracker.try_claim(b)
    assert tracker.try_claim(FileEnd(b))
    primary, residual = tracker.try_split(0)
    assert residual == FollowedFiles(frozenset({a, b}))
    assert primary.seen == frozenset({b})
    # After the checkpoint nothing more is claimed: /d/c is the remainder's.
    assert not tracker.try_claim(c)
    tracker.check_done()


def test_a_file_replaced_under_its_name_is_forgotten_as_it_was():
    before, replaced = _file("/d/a", 10, 1.0), _file("/d/a", 12, 2.0)
    tracker = FollowedFilesTracker(FollowedFiles(frozenset({before})))
    assert tracker.try_claim(FileListing(frozenset({replaced})))
    assert tracker.try_claim(replaced)
    assert tracker.try_claim(FileEnd(replaced))
    _, residual = tracker.try_split(0)
    assert residual == FollowedFiles(frozenset({replaced}))


def test_a_checkpoint_asked_while_a_file_is_read_is_taken_at_its_end():
    # A runner's split, taken in the middle of a file, would leave the
    # remainder a watermark state without the file's last records.
    a, b = _file("/d/a"), _file("/d/b")
    tracker = FollowedFilesTracker(FollowedFiles())
    assert tracker.try_claim(FileListing(frozenset({a, b})))
    assert tracker.try_claim(a)
    assert tracker.try_split(0) is None  # a's records are still being output
    assert not tracker.try_claim(FileEnd(a))  # now the poll defers
    primary, residual = tracker.try_split(0)
    assert (primary.seen, residual.seen) == ({a}, {a})
    assert not tracker.try_claim(b)
    tracker.check_done()


def test_a_followed_directory_that_did_not_checkpoint_is_not_done():
    tracker = FollowedFilesTracker(FollowedFiles())
    with pytest.raises(ValueError, match="never done"):
        tracker.check_done()
    # A drained restriction reads once and ends.
    FollowedFilesTracker(FollowedFiles(final=True)).check_done()


def test_only_a_checkpoint_splits_a_followed_directory():
    tracker = FollowedFilesTracker(FollowedFiles())
    assert tracker.try_split(0.5) is None


def test_a_checkpoint_that_names_the_classes_by_their_old_module_is_read():
    # A restriction and its watermark state, pickled as a checkpoint of
    # before the split of this module kept them.
    restriction = FollowedFiles(frozenset({_file("/in/a.csv")}))
    state = InjectorState(watermark_ms=5, newest_ms=7, last_record_s=1.5)
    for value in (restriction, state):
        old = pickle.dumps(value, protocol=0)
        for module in (b"followed_files", b"injector_watermark"):
            old = old.replace(
                b"transforms.records." + module, b"transforms.records.follow"
            )
        assert b"transforms.records.follow\n" in old
        assert pickle.loads(old) == value


def test_the_watermark_trails_the_newest_event_by_the_disorder_bound():
    settings = FollowSettings(max_disorder_seconds=60)
    estimator = InjectorWatermark(InjectorState(), settings)
    assert estimator.current_watermark() == MIN_TIMESTAMP
    estimator.observe_timestamp(to_timestamp(T0 + 5 * MINUTE))
    estimator.observe_timestamp(to_timestamp(T0 + 2 * MINUTE))  # out of order
    estimator.observe_timestamp(MIN_TIMESTAMP)  # a dead letter
    assert to_millis(estimator.current_watermark()) == T0 + 4 * MINUTE


def test_the_watermark_never_goes_back_when_resumed():
    settings = FollowSettings(max_disorder_seconds=60)
    first = InjectorWatermark(InjectorState(), settings)
    first.observe_timestamp(to_timestamp(T0 + 5 * MINUTE))
    resumed = InjectorWatermark(first.get_estimator_state(), settings)
    resumed.observe_timestamp(to_timestamp(T0 + MINUTE))
    assert to_millis(resumed.current_watermark()) == T0 + 4 * MINUTE


def test_an_idle_input_moves_the_watermark_up_to_its_newest_event():
    settings = FollowSettings(max_disorder_seconds=60, idle_timeout_seconds=0.2)
    estimator = InjectorWatermark(InjectorState(), settings)
    estimator.observe_timestamp(to_timestamp(T0 + 5 * MINUTE))
    assert to_millis(estimator.current_watermark()) == T0 + 4 * MINUTE
    time.sleep(0.3)
    assert to_millis(estimator.current_watermark()) == T0 + 5 * MINUTE


@pytest.mark.parametrize(
    "settings",
    [
        {"poll_seconds": 0},
        {"max_disorder_seconds": -1},
        {"idle_timeout_seconds": -1},
    ],
)
def test_settings_out_of_range_are_refused(settings):
    with pytest.raises(ValueError):
        FollowSettings(**settings)


# -- a checkpoint asked by the runner while a file is read -------------------


def test_a_checkpoint_asked_in_the_middle_of_a_file_leaves_the_watermark_its_end(
    tmp_path,
):
    # The SparkRunner checkpoints a source once it has output
    # --streaming_max_records_per_batch records, from another thread, most
    # often in the middle of a file, which is read to its end all the same.
    # The remainder's watermark state was the one taken at the split: it
    # had not seen the file's last searches, and with no file after them
    # the idle timeout took the watermark to a search in the middle of the
    # last file, and no further (the README's live run stuck at 23:47:14,
    # the event time of line 101,165 of 104,270 of its last part).
    settings = FollowSettings(max_disorder_seconds=60, idle_timeout_seconds=0.2)
    follow = FollowSearchQueries(str(tmp_path / "*.jsonl"), settings=settings)
    _drop(tmp_path, "a.jsonl", [T0 + i * 1_000 for i in range(300)])
    _drop(tmp_path, "b.jsonl", [T0 + 400_000])
    outputs, rest, state = followed_polls.poll_checkpointed(
        follow, FollowedFiles(), InjectorState(), after_outputs=10
    )
    # a.jsonl read whole, b.jsonl left to the next batch.
    assert [o.value.record_id for o in outputs] == [f"a.jsonl-{i}" for i in range(300)]
    assert {v.path for v in rest.seen} == {str(tmp_path / "a.jsonl")}
    time.sleep(0.3)
    # Idle: the watermark reaches the newest search read, not the one read
    # when the checkpoint was asked.
    watermark = InjectorWatermark(state, settings)
    assert to_millis(watermark.current_watermark()) == T0 + 299_000
    outputs, _, state = followed_polls.poll_checkpointed(
        follow, rest, watermark.get_estimator_state(), after_outputs=10
    )
    assert [o.value.record_id for o in outputs] == ["b.jsonl-0"]
    assert state.newest_ms == T0 + 400_000


# The watermark state of the README's live run that stopped short (its
# checkpoint's offsets/149.json, as the code of before 2026-11-27 pickled
# it): newest event 2026-01-05T23:47:14.110Z, a search in the middle of its
# last file, whose newest was 23:59:59.391.
_STATE_CUT_SHORT = (
    b"\x80\x05\x95\x87\x00\x00\x00\x00\x00\x00\x00\x8c%transforms.records."
    b"injector_watermark\x94\x8c\rInjectorState\x94\x93\x94)\x81\x94}\x94(\x8c"
    b"\x0cwatermark_ms\x94\x8a\x06>\xc4\x8e\x90\x9b\x01\x8c\tnewest_ms\x94\x8a"
    b"\x06>\xc4\x8e\x90\x9b\x01\x8c\rlast_record_s\x94GA\xda\xc2y>\xa1\xbaYub."
)


def test_a_watermark_checkpointed_short_of_the_files_read_is_completed_on_resume(
    tmp_path, caplog
):
    # Restarted on such a checkpoint, the job stayed where it had stopped
    # (windows emitted 5700 of 5740): no file was left to read, and the
    # checkpoint does not say which file the watermark lacks the end of.
    # The files it counts as read that are still there are read again,
    # once, for their newest event time; their records are not output.
    settings = FollowSettings(max_disorder_seconds=60, idle_timeout_seconds=0.2)
    follow = FollowSearchQueries(str(tmp_path / "*.jsonl"), settings=settings)
    state = pickle.loads(_STATE_CUT_SHORT)
    cut_at, newest = T0 + 85_634_110, T0 + 86_399_391
    assert (state.newest_ms, state.watermark_ms) == (cut_at, cut_at)
    assert not state.observed_all
    _drop(tmp_path, "part-00003.jsonl", [cut_at - 1_000, cut_at, newest, newest - 5])
    stat = (tmp_path / "part-00003.jsonl").stat()
    part = FileVersion(str(tmp_path / "part-00003.jsonl"), stat.st_size, stat.st_mtime)
    archived = _file(str(tmp_path / "part-00002.jsonl"))  # cleared since
    watermark = InjectorWatermark(state, settings)
    with caplog.at_level(logging.INFO, logger="transforms.records.follow"):
        records, dead, rest = _poll(
            follow, FollowedFiles(frozenset({part, archived})), watermark
        )
    assert (records, dead) == ([], [])
    assert rest.seen == {part}
    assert watermark.get_estimator_state().newest_ms == newest
    time.sleep(0.3)
    assert to_millis(watermark.current_watermark()) == newest
    # Once: the state resumed from now has seen every file read.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transforms.records.follow"):
        resumed = InjectorWatermark(watermark.get_estimator_state(), settings)
        assert _poll(follow, rest, resumed)[:2] == ([], [])
    assert "read again" not in caplog.text


# -- a file that does not end whole, polled by the source's DoFn --------------

# Searches as CSV, the format in which a cut line still parses: cut inside
# its last field, `b-17` reads as the search `b-1`.
_CSV_HEADER = "query,event_time,record_id\n"


def _csv_line(record_id: str, event_ms: int) -> str:
    return f"q,{event_ms},{record_id}\n"


def _poll(
    follow: FollowSearchQueries,
    restriction: FollowedFiles,
    watermark: InjectorWatermark | None = None,
):
    """One poll of the followed directory: the record ids and dead-letter
    reasons it output, and the restriction it left for the next poll. The
    records' times go to `watermark`, as a runner sends them."""
    watermark = watermark or InjectorWatermark(InjectorState(), FollowSettings())
    outputs, rest = followed_polls.poll(follow, restriction, watermark)
    records = [o.value.record_id for o in outputs if not isinstance(o, TaggedOutput)]
    for output in outputs:
        if not isinstance(output, TaggedOutput):
            watermark.observe_timestamp(output.timestamp)
    dead = [o.value.reason for o in outputs if isinstance(o, TaggedOutput)]
    return records, dead, rest


def _settled(path, seconds: float = 60) -> None:
    """Dates `path`'s modification back, as a writer that finished that long
    ago leaves it."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_line_cut_by_a_writer_in_place_is_read_only_once_it_is_whole(tmp_path):
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    path = tmp_path / "b.csv"
    cut = _CSV_HEADER + _csv_line("b-0", T0) + _csv_line("b-17", T0 + 1)[:-3]
    path.write_text(cut)
    records, dead, rest = _poll(follow, FollowedFiles())
    assert (records, dead) == ([], [])
    # Still cut at the next poll, the writer slow: still nothing.
    records, dead, rest = _poll(follow, rest)
    assert (records, dead) == ([], [])
    path.write_text(cut + _csv_line("b-17", T0 + 1)[-3:])
    records, dead, rest = _poll(follow, rest)
    assert (records, dead) == (["b-0", "b-17"], [])
    assert _poll(follow, rest)[:2] == ([], [])


def test_a_file_ending_without_a_newline_is_read_once_it_has_settled(tmp_path):
    follow = FollowSearchQueries(
        str(tmp_path / "*.csv"), settings=FollowSettings(settle_seconds=30)
    )
    path = tmp_path / "c.csv"
    path.write_text(_CSV_HEADER + _csv_line("c-0", T0) + _csv_line("c-1", T0)[:-1])
    _settled(path, seconds=20)
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == []
    _settled(path, seconds=31)
    records, _, rest = _poll(follow, rest)
    assert records == ["c-0", "c-1"]


def test_a_file_that_ends_whole_is_read_at_once(tmp_path):
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    (tmp_path / "d.csv").write_text(_CSV_HEADER + _csv_line("d-0", T0))
    (tmp_path / "empty.csv").write_text("")  # created, nothing written yet
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == ["d-0"]
    assert {v.path.rsplit("/", 1)[-1] for v in rest.seen} == {"d.csv"}


def test_a_parquet_file_without_its_footer_waits_for_it(tmp_path):
    follow = FollowSearchQueries(str(tmp_path / "*.parquet"))
    table = pa.table(
        {"query": ["q", "q"], "event_time": [T0, T0 + 1], "record_id": ["p-0", "p-1"]}
    )
    whole = tmp_path / ".whole"
    pq.write_table(table, whole)
    path = tmp_path / "p.parquet"
    path.write_bytes(whole.read_bytes()[:-8])  # the footer's length and magic
    records, dead, rest = _poll(follow, FollowedFiles())
    assert (records, dead) == ([], [])
    path.write_bytes(whole.read_bytes())
    records, dead, _ = _poll(follow, rest)
    assert (records, dead) == (["p-0", "p-1"], [])


_COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("suffix", sorted(_COMPRESSORS))
def test_a_compressed_file_cut_short_is_read_only_once_its_stream_ends(
    tmp_path, suffix
):
    # Read cut, it gave its first records and an `unreadable_file` dead
    # letter, then the same records again once it was complete.
    follow = FollowSearchQueries(str(tmp_path / f"*.csv.{suffix}"))
    path = tmp_path / f"g.csv.{suffix}"
    text = _CSV_HEADER + "".join(_csv_line(f"g-{i}", T0 + i) for i in range(2000))
    whole = _COMPRESSORS[suffix](text.encode())
    path.write_bytes(whole[: len(whole) * 3 // 4])  # a writer three quarters in
    records, dead, rest = _poll(follow, FollowedFiles())
    assert (records, dead) == ([], [])
    path.write_bytes(whole)
    records, dead, rest = _poll(follow, rest)
    assert (records, dead) == ([f"g-{i}" for i in range(2000)], [])
    assert _poll(follow, rest)[:2] == ([], [])


def test_a_compressed_file_that_cannot_be_checked_is_read_once_it_has_settled(
    tmp_path,
):
    # zstd is decompressed by Beam, which reads a cut stream as a shorter
    # file without a word: only its age can say the writer is done.
    follow = FollowSearchQueries(
        str(tmp_path / "*.csv.zst"), settings=FollowSettings(settle_seconds=30)
    )
    path = tmp_path / "z.csv.zst"
    path.write_bytes(
        zstandard.ZstdCompressor().compress(
            (_CSV_HEADER + _csv_line("z-0", T0)).encode()
        )
    )
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == []
    _settled(path, seconds=31)
    records, _, rest = _poll(follow, rest)
    assert records == ["z-0"]


def test_a_directory_gone_for_a_while_forgets_no_file_read(tmp_path):
    # Taken as every file gone, its files were read again, whole, when the
    # directory came back: each record twice.
    inbox, away = tmp_path / "inbox", tmp_path / "away"
    inbox.mkdir()
    follow = FollowSearchQueries(str(inbox / "*.csv"))
    (inbox / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == ["a-0"]
    inbox.rename(away)  # a volume unmounted, a directory moved away
    records, dead, rest = _poll(follow, rest)
    assert (records, dead) == ([], [])
    assert rest is not None, "a followed directory goes on being polled"
    assert {v.path for v in rest.seen} == {str(inbox / "a.csv")}
    away.rename(inbox)
    (inbox / "b.csv").write_text(_CSV_HEADER + _csv_line("b-0", T0))
    records, _, rest = _poll(follow, rest)
    assert records == ["b-0"]


def test_files_taken_out_of_a_directory_that_remains_are_forgotten(tmp_path):
    # An emptied directory is not a directory gone: its files are forgotten,
    # which keeps the set of files read as small as the directory.
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    (tmp_path / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    _, _, rest = _poll(follow, FollowedFiles())
    (tmp_path / "a.csv").unlink()
    _, _, rest = _poll(follow, rest)
    assert rest.seen == frozenset()


def _counted(monkeypatch) -> collections.Counter:
    """The follow source's counters from here on, as its polls increment
    them (a poll run without a runner has no metrics container)."""
    counts: collections.Counter = collections.Counter()

    class _Counter:
        def __init__(self, name: str) -> None:
            self._name = name

        def inc(self, n: int = 1) -> None:
            counts[self._name] += n

    monkeypatch.setattr(follow_module, "counter", _Counter)
    return counts


def test_a_fifo_the_pattern_matches_is_a_dead_letter_not_a_hang(tmp_path):
    # Opened as a file, it waited for a writer: the poll, and the job's
    # stop behind it (SIGTERM waits for the running batch), hung until one
    # came.
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    _settled(fifo)
    polls = concurrent.futures.ThreadPoolExecutor(1)
    polled = polls.submit(_poll, follow, FollowedFiles())
    try:
        records, dead, rest = polled.result(timeout=30)
    except TimeoutError:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let it return
        raise
    finally:
        polls.shutdown(wait=False)
    assert records == []
    assert dead == [
        f"unreadable file after line 0: {fifo} is a FIFO (named pipe), not a "
        "regular file: not opened"
    ]
    assert _poll(follow, rest)[:2] == ([], [])


def test_a_dangling_symbolic_link_is_one_dead_letter(tmp_path):
    # Beam's listing left it out without a word, poll after poll.
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "target")
    then = time.time() - 60
    os.utime(link, (then, then), follow_symlinks=False)
    records, dead, rest = _poll(follow, FollowedFiles())
    assert records == []
    assert len(dead) == 1 and "No such file" in dead[0]
    assert _poll(follow, rest)[:2] == ([], [])
    # Its target there at last, the link is a file like any other.
    (tmp_path / "target").write_text(_CSV_HEADER + _csv_line("t-0", T0))
    records, dead, rest = _poll(follow, rest)
    assert (records, dead) == (["t-0"], [])


def test_a_directory_the_pattern_matches_is_counted_once(tmp_path, monkeypatch):
    # Beam's listing left it out without a word; a batch run counts it.
    counts = _counted(monkeypatch)
    follow = FollowSearchQueries(str(tmp_path / "*.csv"))
    (tmp_path / "sub.csv").mkdir()
    (tmp_path / "sub.csv" / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    records, dead, rest = _poll(follow, FollowedFiles())
    assert (records, dead) == ([], [])
    assert counts["directories_skipped"] == 1
    (tmp_path / "sub.csv" / "b.csv").write_text(_CSV_HEADER + _csv_line("b-0", T0))
    assert _poll(follow, rest)[:2] == ([], [])
    assert counts["directories_skipped"] == 1


def test_a_link_to_a_file_read_under_another_path_is_not_read_again(
    tmp_path, monkeypatch
):
    # Each path was read: the file's records counted twice, without a word.
    # (A batch run refuses such a pattern; a followed file comes later.)
    counts = _counted(monkeypatch)
    inbox, elsewhere = tmp_path / "inbox", tmp_path / "elsewhere.csv"
    inbox.mkdir()
    follow = FollowSearchQueries(str(inbox / "*.csv"))
    (inbox / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == ["a-0"]
    (inbox / "to-a.csv").symlink_to(inbox / "a.csv")
    (inbox / "b.csv").write_text(_CSV_HEADER + _csv_line("b-0", T0))
    (inbox / "to-b.csv").symlink_to("b.csv")  # with its target, at one poll
    elsewhere.write_text(_CSV_HEADER + _csv_line("e-0", T0))
    (inbox / "to-elsewhere.csv").symlink_to(elsewhere)  # read through the link
    records, dead, rest = _poll(follow, rest)
    assert (sorted(records), dead) == (["b-0", "e-0"], [])
    assert counts["same_files_skipped"] == 2
    assert _poll(follow, rest)[:2] == ([], [])
    assert counts["same_files_skipped"] == 2


def _follow_clearing(inbox, action: str, archive=None) -> FollowSearchQueries:
    after_read = AfterRead(action, str(archive) if archive else None)
    return FollowSearchQueries(
        str(inbox / "*.csv"), settings=FollowSettings(after_read=after_read)
    )


def test_a_read_file_is_archived_at_the_poll_after_the_one_that_read_it(tmp_path):
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    inbox.mkdir()
    archive.mkdir()
    (archive / "a.csv").write_text("archived earlier\n")
    follow = _follow_clearing(inbox, "archive", archive)
    (inbox / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    records, _, rest = _poll(follow, FollowedFiles())
    # Its batch is not committed yet: were it to fail, the file is read again.
    assert records == ["a-0"]
    assert (inbox / "a.csv").exists()
    (inbox / "b.csv").write_text(_CSV_HEADER + _csv_line("b-0", T0))
    records, _, rest = _poll(follow, rest)
    # The restriction this poll resumed from was committed with a.csv read.
    assert records == ["b-0"]
    assert sorted(p.name for p in inbox.iterdir()) == ["b.csv"]
    assert (archive / "a.csv").read_text() == "archived earlier\n"
    assert (archive / "a.csv.1").read_text() == _CSV_HEADER + _csv_line("a-0", T0)
    # Forgotten as any file gone: the set of files read stays small.
    assert {v.path for v in rest.seen} == {str(inbox / "b.csv")}
    records, _, rest = _poll(follow, rest)
    assert records == []
    assert list(inbox.iterdir()) == [] and rest.seen == frozenset()


def test_a_read_file_is_deleted_at_the_poll_after_the_one_that_read_it(tmp_path):
    follow = _follow_clearing(tmp_path, "delete")
    (tmp_path / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    records, _, rest = _poll(follow, FollowedFiles())
    assert records == ["a-0"] and (tmp_path / "a.csv").exists()
    records, _, rest = _poll(follow, rest)
    assert records == [] and not (tmp_path / "a.csv").exists()
    assert rest.seen == frozenset()


def test_a_file_replaced_after_it_was_read_is_read_before_it_is_deleted(tmp_path):
    # The new version under the old name has not been read: deleting it as
    # the file read would lose its records.
    follow = _follow_clearing(tmp_path, "delete")
    path = tmp_path / "a.csv"
    path.write_text(_CSV_HEADER + _csv_line("a-0", T0))
    _settled(path)
    _, _, rest = _poll(follow, FollowedFiles())
    path.write_text(_CSV_HEADER + _csv_line("a-1", T0) + _csv_line("a-2", T0))
    records, _, rest = _poll(follow, rest)
    assert records == ["a-1", "a-2"] and path.exists()
    records, _, rest = _poll(follow, rest)
    assert records == [] and not path.exists()


def test_a_read_file_the_file_system_refuses_to_move_stays_read(tmp_path):
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    inbox.mkdir()
    follow = _follow_clearing(inbox, "archive", archive)  # archive not there
    (inbox / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0))
    _, _, rest = _poll(follow, FollowedFiles())
    records, _, rest = _poll(follow, rest)
    # Neither moved nor forgotten, which would read it again.
    assert records == [] and (inbox / "a.csv").exists()
    assert {v.path for v in rest.seen} == {str(inbox / "a.csv")}
    archive.mkdir()
    records, _, rest = _poll(follow, rest)
    assert records == [] and (archive / "a.csv").exists()


@pytest.mark.parametrize(
    "action, archive_dir",
    [("move", None), ("archive", None), ("delete", "/tmp"), ("keep", "/tmp")],
)
def test_an_after_read_policy_that_makes_no_sense_is_refused(action, archive_dir):
    with pytest.raises(ValueError, match="after_read"):
        AfterRead(action, archive_dir)


def test_read_files_are_cleared_on_a_local_file_system_only():
    settings = FollowSettings(after_read=AfterRead("delete"))
    with pytest.raises(ValueError, match="local file system"):
        FollowSearchQueries("gs://bucket/inbox/*.csv", settings=settings)


@pytest.mark.parametrize(
    "pattern, archive",
    [("inbox/*", "inbox/."), ("*/*.csv", "archive"), ("in*/*.csv", "inbox2")],
)
def test_no_followed_directory_is_an_archive(tmp_path, pattern, archive):
    settings = FollowSettings(after_read=AfterRead("archive", f"{tmp_path}/{archive}"))
    with pytest.raises(ValueError, match="would be read again"):
        FollowSearchQueries(f"{tmp_path}/{pattern}", "csv", settings=settings)


def test_a_file_waiting_to_be_read_keeps_the_input_from_being_idle(tmp_path):
    settings = FollowSettings(max_disorder_seconds=60, idle_timeout_seconds=0.2)
    follow = FollowSearchQueries(str(tmp_path / "*.csv"), settings=settings)
    watermark = InjectorWatermark(InjectorState(), settings)
    (tmp_path / "a.csv").write_text(_CSV_HEADER + _csv_line("a-0", T0 + 5 * MINUTE))
    _, _, rest = _poll(follow, FollowedFiles(), watermark)
    time.sleep(0.3)  # idle by now: the watermark would reach T0 + 5 min
    (tmp_path / "b.csv").write_text(_CSV_HEADER + _csv_line("b-0", T0)[:-1])
    records, _, _ = _poll(follow, rest, watermark)
    assert records == []
    # b.csv's search, in flight, is not made late by the idle timeout.
    assert to_millis(watermark.current_watermark()) == T0 + 4 * MINUTE


def test_a_drain_waits_for_a_file_still_being_written(tmp_path):
    follow = FollowSearchQueries(
        str(tmp_path / "*.csv"), settings=FollowSettings(settle_seconds=1.5)
    )
    path = tmp_path / "e.csv"
    path.write_text(_CSV_HEADER + _csv_line("e-0", T0)[:-1])
    started = time.monotonic()
    records, _, rest = _poll(follow, FollowedFiles(final=True))
    assert records == ["e-0"]
    assert time.monotonic() - started >= 1.0
    assert rest is None  # a drained restriction ends


# -- on SparkRunner in streaming ----------------------------------------------


def _append(path, line) -> None:
    with open(path, "a") as out:
        out.write(f"{line}\n")


def _wait_for(predicate, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.1)


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.spark
@pytest.mark.slow
def test_files_arriving_in_waves_are_each_read_once_and_windows_close_on_event_time(
    tmp_path, spark_session
):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    counts, dead, read = (tmp_path / n for n in ("counts", "dead", "read"))
    _drop(inbox, "a.jsonl", [T0 + 1_000, T0 + 2_000, T0 + 30_000], extra="not json\n")
    (inbox / "_writing.jsonl").write_text("never read\n")  # hidden: in progress

    pipeline = beam.Pipeline(
        runner=SparkRunner(),
        options=PipelineOptions(
            ["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoint'}"]
        ),
    )
    searches = pipeline | FollowSearchQueries(
        str(inbox / "*.jsonl"),
        settings=FollowSettings(poll_seconds=0.3, max_disorder_seconds=30),
    )
    _ = searches[RECORDS] | "Read" >> beam.Map(lambda r: _append(read, r.record_id))
    _ = (
        searches[RECORDS]
        | beam.WindowInto(FixedWindows(60))
        | beam.Map(lambda r: (r.query, 1))
        | beam.CombinePerKey(sum)
        | beam.ParDo(_WindowCount())
        | "Counts" >> beam.Map(lambda line: _append(counts, line))
    )
    _ = searches[DEAD_LETTERS] | beam.Map(lambda d: _append(dead, d.reason))
    result = pipeline.run()
    try:
        _wait_for(lambda: len(_lines(read)) == 3 and _lines(dead))
        # Newest event T0+30 s less 30 s of disorder: no window has closed.
        assert _lines(counts) == []
        # Newest event T0+100 s less 30 s of disorder closes the first window.
        _drop(inbox, "b.jsonl", [T0 + 61_000, T0 + 100_000])
        _wait_for(lambda: _lines(counts))
        assert _lines(counts) == [f"{T0} 3"]
        _drop(inbox, "c.jsonl", [T0 + 170_000])
        _wait_for(lambda: len(_lines(counts)) == 2)
        assert _lines(counts)[1:] == [f"{T0 + 60_000} 2"]
        # a.jsonl replaced under its name by a new file: another file, read.
        (inbox / "a.jsonl").unlink()
        _drop(inbox, "a.jsonl", [T0 + 171_000])
        _wait_for(lambda: len(_lines(read)) == 7)
        # e.jsonl written in place, cut inside its second line: not read
        # while cut, though f.jsonl, which came after it, is.
        in_place = inbox / "e.jsonl"
        whole = _json_lines("e.jsonl", [T0 + 172_000, T0 + 173_000])
        in_place.write_text(whole[:-10])
        _drop(inbox, "f.jsonl", [T0 + 174_000])
        _wait_for(lambda: len(_lines(read)) == 8)
        assert _lines(read)[-1] == "f.jsonl-0"
        in_place.write_text(whole)
        _wait_for(lambda: len(_lines(read)) == 10)
    finally:
        # Draining reads whatever arrived meanwhile and closes every window.
        _drop(inbox, "d.jsonl", [T0 + 175_000])
        assert result.drain() == PipelineState.DONE
    assert sorted(_lines(read)) == sorted(
        ["a.jsonl-0", "a.jsonl-1", "a.jsonl-2", "b.jsonl-0", "b.jsonl-1"]
        + ["c.jsonl-0", "a.jsonl-0", "e.jsonl-0", "e.jsonl-1", "f.jsonl-0"]
        + ["d.jsonl-0"]
    )
    assert sorted(_lines(counts)) == [
        f"{T0} 3",
        f"{T0 + 60_000} 2",
        f"{T0 + 120_000} 6",
    ]
    assert _lines(dead) == ["invalid JSON: Expecting value at column 1"]
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "millwheel.records"
    }
    assert counters["files_followed"] == 7
    assert counters["files_read_again"] == 1
    assert counters["records_read"] == 11


class _WindowCount(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam):
        yield f"{to_millis(window.start)} {element[1]}"

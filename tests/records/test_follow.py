"""FollowRecords: files read once as they arrive, a watermark from event
times, and a drain that reads what is there. The source runs on this
project's SparkRunner in streaming, over real files in a real directory."""

import json
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.window import FixedWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from runners.spark import SparkRunner
from transforms.millwheel.event_time import to_millis, to_timestamp
from transforms.records.follow import (
    FileListing,
    FileVersion,
    FollowedFiles,
    FollowedFilesTracker,
    FollowSearchQueries,
    FollowSettings,
    InjectorState,
    InjectorWatermark,
)
from transforms.records.readers import DEAD_LETTERS, RECORDS

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z
MINUTE = 60_000


def _drop(directory, name: str, times: list[int], extra: str = "") -> None:
    """Writes a JSON Lines file under a hidden name, then renames it into
    place, as the follow mode asks of writers."""
    lines = "".join(
        json.dumps({"query": "q", "event_time": t, "record_id": f"{name}-{i}"}) + "\n"
        for i, t in enumerate(times)
    )
    hidden = directory / f".{name}"
    hidden.write_text(lines + extra)
    hidden.rename(directory / name)


# -- the restriction and the watermark, without a runner ----------------------


def _file(path: str, size: int = 10, last_updated: float = 1.0) -> FileVersion:
    return FileVersion(path, size, last_updated)


def test_a_checkpoint_remembers_the_files_read_and_forgets_the_files_gone():
    a, b, c, gone = _file("/d/a"), _file("/d/b"), _file("/d/c"), _file("/d/gone")
    tracker = FollowedFilesTracker(FollowedFiles(frozenset({a, gone})))
    assert tracker.try_claim(FileListing(frozenset({a, b, c})))
    assert tracker.try_claim(b)
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
    _, residual = tracker.try_split(0)
    assert residual == FollowedFiles(frozenset({replaced}))


def test_a_followed_directory_that_did_not_checkpoint_is_not_done():
    tracker = FollowedFilesTracker(FollowedFiles())
    with pytest.raises(ValueError, match="never done"):
        tracker.check_done()
    # A drained restriction reads once and ends.
    FollowedFilesTracker(FollowedFiles(final=True)).check_done()


def test_only_a_checkpoint_splits_a_followed_directory():
    tracker = FollowedFilesTracker(FollowedFiles())
    assert tracker.try_split(0.5) is None


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
    finally:
        # Draining reads whatever arrived meanwhile and closes every window.
        _drop(inbox, "d.jsonl", [T0 + 175_000])
        assert result.drain() == PipelineState.DONE
    assert sorted(_lines(read)) == sorted(
        ["a.jsonl-0", "a.jsonl-1", "a.jsonl-2", "b.jsonl-0", "b.jsonl-1"]
        + ["c.jsonl-0", "a.jsonl-0", "d.jsonl-0"]
    )
    assert sorted(_lines(counts)) == [
        f"{T0} 3",
        f"{T0 + 60_000} 2",
        f"{T0 + 120_000} 3",
    ]
    assert _lines(dead) == ["invalid JSON: Expecting value at column 1"]
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "millwheel.records"
    }
    assert counters["files_followed"] == 5
    assert counters["files_read_again"] == 1
    assert counters["records_read"] == 8


class _WindowCount(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam):
        yield f"{to_millis(window.start)} {element[1]}"

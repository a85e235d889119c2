"""Follow a directory: read record files as they arrive, for as long as the
job runs.

`FollowRecords` is the unbounded counterpart of `ReadRecords`: the same
formats, outputs (`RECORDS`, `DEAD_LETTERS`), reasons and counters, but the
file pattern is polled every `poll_seconds` and each file that matches is
read once, whole, when it first appears. It is one splittable DoFn, so it
runs on any runner with unbounded splittable DoFns (this project's
SparkRunner in streaming, Beam's DirectRunner in streaming):

- **Each file once, across restarts.** The restriction is the set of files
  already read, each as its path, size and modification time (a
  `FileVersion`). A poll's remainder carries it, so a runner that
  checkpoints remainders with the outputs (the SparkRunner commits both in
  one batch) never reads a file twice nor skips one. A file that is gone
  from the directory is forgotten, which keeps the set as small as the
  directory; the directory itself gone (a volume unmounted) forgets none,
  or they would all be read again on its return (a warning and the
  counter `directory_gone_polls` say so). A file replaced under the same name,
  while the job ran or while it was down, is another version, read whole
  (a warning and the counter `files_read_again` say so): by path alone it
  was skipped, its records lost without a word.
- **What is no file to read is not passed over unseen.** A dangling
  symbolic link (a version of its own modification time, which Beam's
  listing leaves out) is an `unreadable_file` dead letter once it has
  settled, and a FIFO, socket or device one when it is read, never opened
  (a FIFO would wait for a writer, and the job with it). A directory the
  pattern matches is not read, as in a batch run, and counted once in
  `directories_skipped`. A path that leads to a file read under another
  (a symbolic link and its target, both matched) is not read again, or
  its records would count twice: a warning and `same_files_skipped`.
- **Files must appear whole.** Write a file elsewhere (or under a name
  starting with `.` or `_`, which are never read) and rename it into place:
  a file is read as it is at the poll that finds it, and one written to in
  place after that is read again, whole, its first records twice.
- **A file that does not end as a whole file waits.** A text file whose
  last line has no newline, a Parquet file without its footer, or an empty
  file is read only once it has not been modified for `settle_seconds` (a
  drain waits that long for it). A writer caught in the middle of a line
  would otherwise have its cut line parsed as a shorter, valid record (a
  count of `12` for `123`, a record id `b-1` for `b-17`), and the whole
  line read again with the file: both counted, or, with record-id dedup
  and the id intact, only the cut one. Wrong counts, and no dead letter. A
  file that simply ends without a newline is read all the same,
  `settle_seconds` late. A compressed file waits the same way while its
  stream is cut short, which reading it through finds (gzip, bzip2,
  xz/lzma, deflate; a zstd file, which cannot be checked, waits until it
  has settled): read at once, its first records would be counted, then a
  dead letter, then the same records again with the completed file.
- **Event time from the records.** Each record is stamped with its
  `event_time`. The watermark is MillWheel's injector estimate: the newest
  event time read, less `max_disorder_seconds` (how far a record may arrive
  behind a newer one and still be on time). Once no newer event time has
  been read for `idle_timeout_seconds`, and no file waits to settle,
  nothing is assumed in flight and the watermark moves up to the newest
  event time read, so the last windows of a quiet stream close. Replaying
  old files live thus gives the windows a batch run gives, whatever the
  clock says.
- **Read files kept, deleted or archived.** By default a file read stays
  where it is. With `after_read` (`AfterRead`) deleting it, or moving it
  into an archive directory, it is cleared at the first poll after the
  batch that read it is committed, so that a directory that keeps filling
  is listed and checkpointed at the size of its unread files (the counters
  `files_deleted`, `files_archived`; `files_not_cleared` for a file the
  file system refused, which stays, known as read, and is tried again).
- **Drain** (the runner's `drain()`) reads the files present at that moment
  and ends; the watermark then goes to the end of time, as in a batch run.

A large backlog (say, on restart) is read a file at a time: a runner that
caps the records of a batch checkpoints between files, never inside one. A
checkpoint it asks for while a file is read is taken at the file's end
(`FollowedFilesTracker`), so that the remainder's watermark has seen every
record read. (Until 2026-11-27 it was taken at once, its watermark without
the event times of the rest of the file; a job resumed on such a
checkpoint reads the files it has read once more, for their newest event
time only.)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import time
import zlib
from collections.abc import Iterator
from typing import Any, ClassVar

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp
from google.protobuf.message import Message

from transforms.millwheel.event_time import to_timestamp
from transforms.millwheel.state_params import apply_with_state_params, path_param
from transforms.records.after_read import AfterRead
from transforms.records.compressed import open_checked
from transforms.records.dead_letters import Parser, counter
from transforms.records.file_reader import FileReader

# Checkpoints pickle a followed directory's restriction and watermark state
# by class path; those written before the classes moved to their own modules
# name them here, so FollowedFiles stays importable from this module.
from transforms.records.followed_files import (  # noqa: F401
    DIRECTORY_SIZE,
    FileEnd,
    FileListing,
    FileVersion,
    FollowedFiles,
    FollowedFilesProvider,
    ends_whole,
    followed_directory,
    is_hidden,
    other_paths,
    unlisted_versions,
)
from transforms.records.injector_watermark import InjectorState, InjectorWatermark
from transforms.records.readers import (
    DEFAULT_MAX_LINE_BYTES,
    ReadClickEvents,
    ReadQueryEvents,
    ReadRecords,
    ReadSearchQueries,
    read_file,
    record_format,
    split_outputs,
)

__all__ = [
    "FollowClickEvents",
    "FollowQueryEvents",
    "FollowRecords",
    "FollowSearchQueries",
    "FollowSettings",
]

_LOGGER = logging.getLogger(__name__)
# What a damaged file raises while it is read, as `read_file` has them.
_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException)


@dataclasses.dataclass(frozen=True)
class FollowSettings:
    """How a followed directory is polled and how its watermark moves."""

    poll_seconds: float = 1.0
    max_disorder_seconds: float = 0.0
    idle_timeout_seconds: float = 0.0  # 0: the watermark never jumps ahead
    # How long a file that does not end whole must stay unmodified to be read.
    settle_seconds: float = 5.0
    after_read: AfterRead = AfterRead()

    def __post_init__(self) -> None:
        if self.poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be positive, got {self.poll_seconds}")
        for name in ("max_disorder_seconds", "idle_timeout_seconds", "settle_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")


class _FollowFilesFn(beam.DoFn, WatermarkEstimatorProvider):
    """Polls the pattern; reads each new file. It is its own watermark
    estimator provider because the estimator needs this source's settings,
    which a provider named in `process`'s signature could not have."""

    def __init__(
        self,
        file_pattern: str,
        parser: Parser,
        record_type: str,
        fmt: str,
        max_line_bytes: int,
        settings: FollowSettings,
    ) -> None:
        self._pattern = file_pattern
        self._parser = parser
        self._record_type = record_type
        self._format = fmt
        self._max_line_bytes = max_line_bytes
        self._settings = settings

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element: Any,
        tracker=beam.DoFn.RestrictionParam(FollowedFilesProvider()),
        _watermark: InjectorWatermark = beam.DoFn.WatermarkEstimatorParam(),
    ) -> Iterator[Any]:
        restriction = tracker.current_restriction()
        listed = FileSystems.match([self._pattern])[0].metadata_list
        found = frozenset(
            FileVersion(m.path, m.size_in_bytes, m.last_updated_in_seconds)
            for m in listed
            if not is_hidden(m.path)
        ) | unlisted_versions(self._pattern, {m.path for m in listed})
        if not found and restriction.seen and self._directory_gone():
            # Taken as every file gone, the files would all be read again
            # when the directory came back (a volume remounted, a directory
            # moved away and back), each record a second time.
            if not restriction.final:
                tracker.defer_remainder(Duration.of(self._settings.poll_seconds))
            return
        self._gone = False
        if self._settings.after_read.clears:
            # The restriction this bundle resumed from was committed with
            # the outputs of the batch that read these files.
            found -= self._clear(restriction.seen & found)
        if not tracker.try_claim(FileListing(found)):
            return
        if not _watermark.observed_all():
            _watermark.observe_again(self._newest_read(restriction.seen & found))
        read_before = {version.path for version in restriction.seen}
        new = sorted(found - restriction.seen, key=lambda v: (v.last_updated, v.path))
        read_as = other_paths(new, found)
        self._waiting &= found
        for version in new:
            if not self._ready(version, restriction.final):
                _watermark.input_pending()
                continue
            if not tracker.try_claim(version):
                return
            yield from self._take(version, version.path in read_before, read_as)
            if not tracker.try_claim(FileEnd(version)):
                # The runner asked for a checkpoint while the file was read
                # (its record cap): taken now, the remainder's watermark
                # state has every record read. It resumes at once.
                tracker.defer_remainder()
                return
        if not restriction.final:
            tracker.defer_remainder(Duration.of(self._settings.poll_seconds))

    def _take(
        self, version: FileVersion, read_before: bool, read_as: dict[FileVersion, str]
    ) -> Iterator[Any]:
        """The records and dead letters of the new `version`, claimed; none
        for a directory, or for another path to a file read (`read_as`),
        each counted and logged instead."""
        if version.size == DIRECTORY_SIZE:
            # As in a batch run: its files are no part of the pattern.
            _LOGGER.warning(
                "%s is a directory the pattern matches: not read (follow "
                "DIR/* for its files)",
                version.path,
            )
            counter("directories_skipped").inc()
            return
        if version in read_as:
            _LOGGER.warning(
                "%s leads to the file read as %s: not read again, its records "
                "would count twice",
                version.path,
                read_as[version],
            )
            counter("same_files_skipped").inc()
            return
        if read_before:
            _LOGGER.warning(
                "%s changed after it was read (replaced, or written to in "
                "place): reading it again, whole",
                version.path,
            )
            counter("files_read_again").inc()
        counter("files_followed").inc()
        yield from self._read(version.path)

    def setup(self) -> None:
        self._waiting: set[FileVersion] = set()
        self._gone = False  # whether the directory was missing at the last poll
        self._refused: set[FileVersion] = set()  # read files not cleared, warned

    def _clear(self, read: frozenset[FileVersion]) -> set[FileVersion]:
        """Deletes or archives the files of `read`; returns those cleared.
        One the file system refuses stays, still known as read, and is
        tried again at the next poll; a process warns once for it."""
        after_read = self._settings.after_read
        cleared = set()
        for version in sorted(read):
            try:
                if after_read.clear(version):
                    cleared.add(version)
                    counter(after_read.counter_name).inc()
            except OSError as error:
                counter("files_not_cleared").inc()
                if version not in self._refused:
                    self._refused.add(version)
                    _LOGGER.warning(
                        "%s was read but cannot be %sd: %s; it stays, and is "
                        "tried again at each poll",
                        version.path,
                        after_read.action,
                        error,
                    )
        self._refused &= read
        return cleared

    def _directory_gone(self) -> bool:
        """Whether the followed directory no longer exists. Each such poll
        is counted; a process logs the first of a disappearance (a
        directory's polls may move between worker processes)."""
        directory = followed_directory(self._pattern)
        if directory is None or os.path.isdir(directory):
            return False
        counter("directory_gone_polls").inc()
        if not self._gone:
            _LOGGER.warning(
                "the followed directory %s is gone: its files read so far are "
                "kept as read, and it is polled until it is back",
                directory,
            )
        self._gone = True
        return True

    def _ready(self, version: FileVersion, final: bool) -> bool:
        """Whether `version` may be read now: it ends whole, or has not been
        modified for `settle_seconds` (a writer would have finished it).

        A file left waiting is not claimed, so the next poll looks again. A
        drain waits out the rest of the settling time instead: it ends the
        job, and a file it left would never be read.
        """
        age_s = time.time() - version.last_updated
        settle_s = self._settings.settle_seconds
        # A version already found cut is unchanged since: not checked again,
        # which for a compressed file would mean decompressing it again.
        if age_s >= settle_s or (
            version not in self._waiting and ends_whole(version, self._format)
        ):
            return True
        if final:
            _LOGGER.info(
                "draining: waiting %.1f s for %s to settle",
                settle_s - age_s,
                version.path,
            )
            time.sleep(settle_s - age_s)
            return True
        if version not in self._waiting:
            self._waiting.add(version)
            _LOGGER.info(
                "%s does not end as a whole %s file does: reading it once it "
                "has not changed for %g s",
                version.path,
                self._format,
                settle_s,
            )
        return False

    def _newest_read(self, read: frozenset[FileVersion]) -> Timestamp | None:
        """The newest event time of the files `read`, read again without
        output, for a watermark state checkpointed before 2026-11-27, which
        may lack the last records of a file a runner's checkpoint cut (see
        `FollowedFilesTracker`). Done once, at the first poll of a job
        resumed on such a checkpoint; a file read since cleared (deleted or
        archived) cannot be read again."""
        started = time.monotonic()
        newest = None
        for version in sorted(read):
            reader = FileReader(
                self._parser, self._record_type, self._max_line_bytes, version.path
            )
            try:
                with open_checked(version.path) as fh:
                    for output in reader.read(self._format, fh):
                        if isinstance(output, Message) and (
                            newest is None or output.event_time > newest
                        ):
                            newest = output.event_time
            except _READ_ERRORS as error:
                _LOGGER.warning(
                    "%s: read again for its newest event time, it could not be "
                    "read after line %d: %s",
                    version.path,
                    reader.done,
                    error,
                )
        _LOGGER.info(
            "resumed on a checkpoint of before 2026-11-27, whose watermark may "
            "lack the end of a file: files read so far read again for their "
            "newest event time (%d, in %.1f s): %s",
            len(read),
            time.monotonic() - started,
            None if newest is None else to_timestamp(newest).to_rfc3339(),
        )
        return None if newest is None else to_timestamp(newest)

    def initial_estimator_state(self, element: Any, restriction: Any) -> InjectorState:
        return InjectorState()

    def create_watermark_estimator(self, state: InjectorState) -> InjectorWatermark:
        return InjectorWatermark(state, self._settings)

    def _read(self, path: str) -> Iterator[Any]:
        for output in read_file(
            path, self._parser, self._record_type, self._format, self._max_line_bytes
        ):
            if isinstance(output, Message):
                yield TimestampedValue(output, to_timestamp(output.event_time))
            else:
                yield output


class FollowRecords(beam.PTransform):
    """Read files matching `file_pattern` into `parser`'s messages as they
    appear, for as long as the job runs (see the module docstring).

    The outputs are `ReadRecords`' (a `DoOutputsTuple` of `RECORDS` and
    `DEAD_LETTERS`), and each record is stamped with its `event_time`. The
    output is unbounded: run it in a streaming pipeline. `format` is one of
    `FORMATS`, or None to infer it from the pattern's extension.
    """

    def __init__(
        self,
        file_pattern: str,
        parser: Parser,
        record_type: type[Message],
        format: str | None = None,
        settings: FollowSettings = FollowSettings(),
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        super().__init__()
        fmt = record_format(file_pattern, format)
        _check_after_read(settings.after_read, file_pattern)
        self._pattern = file_pattern
        self._record_type = record_type
        self._follow = _FollowFilesFn(
            file_pattern,
            parser,
            record_type.DESCRIPTOR.name,
            fmt,
            max_line_bytes,
            settings,
        )

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        # The files read are kept, with a checkpoint, by path: followed under
        # another pattern every file would be new, and read a second time.
        return apply_with_state_params(
            pbegin | "Impulse" >> beam.Impulse(),
            "Follow",
            split_outputs(self._follow, self._record_type),
            {"file_pattern": path_param(self._pattern)},
        )


def _check_after_read(after_read: AfterRead, file_pattern: str) -> None:
    """Refuses a policy that cannot clear `file_pattern`'s files, or whose
    archive is the followed directory (its files would be read again)."""
    if not after_read.clears:
        return
    if "://" in file_pattern:
        raise ValueError(
            f"after_read {after_read.action!r} clears files on a local file "
            f"system, not under {file_pattern!r}"
        )
    # The pattern's directory part, a glob itself perhaps: an archive it
    # matches would be followed too (matched as a string, where `*` also
    # crosses a `/`, so that no such archive gets through).
    followed = os.path.dirname(os.path.abspath(file_pattern))
    archive = after_read.archive_dir
    if archive and fnmatch.fnmatchcase(os.path.abspath(archive), followed):
        raise ValueError(
            f"the archive directory {archive!r} is followed by {file_pattern!r}: "
            "archived files would be read again"
        )


class _FollowOneType(FollowRecords):
    """`FollowRecords` of the message type a typed reader reads, parsed by
    that reader's parser: the pairing has one home, the reader."""

    _READER: ClassVar[type[ReadRecords]]

    def __init__(
        self,
        file_pattern: str,
        format: str | None = None,
        settings: FollowSettings = FollowSettings(),
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        super().__init__(
            file_pattern,
            self._READER._PARSER,
            self._READER._RECORD_TYPE,
            format,
            settings,
            max_line_bytes,
        )


class FollowSearchQueries(_FollowOneType):
    """`FollowRecords` of Zeitgeist `SearchQuery`, as `ReadSearchQueries`."""

    _READER = ReadSearchQueries


class FollowQueryEvents(_FollowOneType):
    """`FollowRecords` of Photon `QueryEvent`, as `ReadQueryEvents`."""

    _READER = ReadQueryEvents


class FollowClickEvents(_FollowOneType):
    """`FollowRecords` of Photon `ClickEvent`, as `ReadClickEvents`."""

    _READER = ReadClickEvents

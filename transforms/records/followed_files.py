"""The files of a followed directory, as its splittable DoFn's restriction.

A file is known by its version (path, size, modification time). The
restriction is the set of versions already read; a poll claims its listing,
then each new file, and the end of its read (`FileEnd`), so that a
checkpoint's remainder has read what was claimed and forgets the files no
longer listed. A checkpoint is taken between files, never while a file's
records are still being output (see `FollowedFilesTracker`). `ends_whole`
says whether a version can be read yet, `followed_directory` which local
directory a pattern lists, `unlisted_versions` what a local pattern matches
that Beam's listing leaves out, `other_paths` which new files lead to a file
found under another path. `transforms.records.follow` has the rules these
serve.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
from typing import Any, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.iobase import RestrictionProgress, RestrictionTracker
from apache_beam.transforms.core import RestrictionProvider

from transforms.records.compressed import stream_ends_whole
from transforms.records.readers import glob_entries


class FileVersion(NamedTuple):
    """A file as a poll found it. The same path with another size or
    modification time (a file replaced under its name) is another version.
    A directory the pattern matches is one too, of `DIRECTORY_SIZE`."""

    path: str
    size: int
    last_updated: float


# A matched directory's size and time: one version whatever is written in
# it (which changes its modification time), so that it is counted once.
DIRECTORY_SIZE = -1


@dataclasses.dataclass(frozen=True)
class FollowedFiles:
    """The restriction of a followed directory: the file versions already
    read.

    `final` is a drained restriction: read what is present, then end.
    """

    seen: frozenset[FileVersion] = frozenset()
    final: bool = False


@dataclasses.dataclass(frozen=True)
class FileListing:
    """What matched at one poll; claimed before the poll's files, so that the
    remainder forgets the files that are gone (or replaced)."""

    present: frozenset[FileVersion]


@dataclasses.dataclass(frozen=True)
class FileEnd:
    """The file claimed last has been read to its end, every record of it
    output. Claimed after each file: False says that a checkpoint was asked
    meanwhile, and the poll is to defer its remainder now."""

    version: FileVersion


class FollowedFilesTracker(RestrictionTracker):
    """Claims a poll's listing, then its new files one by one, each followed
    by its `FileEnd`.

    Only a checkpoint splits it (`try_split(0)`, from `defer_remainder` or a
    runner's record cap): the remainder has read everything claimed so far.
    A runner asks for one from another thread, in the middle of a file as
    often as not, and takes the watermark estimator's state for the
    remainder just before it splits. Split there, the remainder would
    resume without the event times of the records the file has yet to
    output, which are read all the same: the watermark would stop short of
    the newest record read, for good if no newer file came (a job stuck at
    a search in the middle of its last file, after its idle timeout, and
    again after a restart). So a checkpoint asked while a file is read is
    refused, and remembered: the file's `FileEnd` claim fails, and the poll
    defers its remainder then, with its watermark state complete.
    """

    def __init__(self, restriction: FollowedFiles) -> None:
        self._restriction = restriction
        self._present: frozenset[FileVersion] | None = None
        self._claimed: list[FileVersion] = []
        self._checkpointed = False
        # The file claimed whose FileEnd is not claimed yet.
        self._reading: FileVersion | None = None
        # A checkpoint asked while a file was read, taken at its end.
        self._checkpoint_asked = False

    def current_restriction(self) -> FollowedFiles:
        return self._restriction

    def try_claim(self, position: FileListing | FileVersion | FileEnd) -> bool:
        if isinstance(position, FileEnd):
            self._reading = None
            return not (self._checkpointed or self._checkpoint_asked)
        if self._checkpointed or self._checkpoint_asked:
            return False
        if isinstance(position, FileListing):
            self._present = position.present
        else:
            self._claimed.append(position)
            self._reading = position
        return True

    def try_split(self, fraction_of_remainder: float) -> Any:
        if fraction_of_remainder != 0 or self._checkpointed:
            return None  # a directory listing cannot be shared out
        if self._reading is not None:
            # Its records are still to come: split at its end instead.
            self._checkpoint_asked = True
            return None
        self._checkpointed = True
        seen = self._restriction.seen | frozenset(self._claimed)
        if self._present is not None:
            seen &= self._present | frozenset(self._claimed)
        primary = FollowedFiles(frozenset(self._claimed), final=True)
        residual = FollowedFiles(seen, self._restriction.final)
        return primary, residual

    def check_done(self) -> None:
        if not (self._checkpointed or self._restriction.final):
            raise ValueError(
                "a followed directory is never done: its process must defer "
                "its remainder"
            )

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(completed=len(self._claimed), remaining=1)

    def is_bounded(self) -> bool:
        return self._restriction.final


class FollowedFilesProvider(RestrictionProvider):
    """Restrictions of a followed directory: none read at first, and on
    drain a last poll."""

    def initial_restriction(self, element: Any) -> FollowedFiles:
        return FollowedFiles()

    def create_tracker(self, restriction: FollowedFiles) -> FollowedFilesTracker:
        return FollowedFilesTracker(restriction)

    def restriction_size(self, element: Any, restriction: FollowedFiles) -> int:
        return 1

    def truncate(self, element: Any, restriction: FollowedFiles) -> FollowedFiles:
        # On drain: one last poll, so files already delivered are not lost.
        return FollowedFiles(restriction.seen, final=True)


def followed_directory(file_pattern: str) -> str | None:
    """The local directory `file_pattern` lists, or None where there is none
    to check: an object store has no directories, and a glob in the
    directory part names no one directory."""
    if "://" in file_pattern:
        return None
    directory = os.path.dirname(file_pattern) or "."
    if any(c in directory for c in "*?["):
        return None
    return directory


def is_hidden(path: str) -> bool:
    # Spark's and Hadoop's convention for files still being written.
    return path.rsplit("/", 1)[-1].startswith((".", "_"))


# The last bytes of a complete file: a text file's last line has its newline,
# a Parquet file ends with its footer's magic number.
_WHOLE_ENDINGS = {"jsonl": b"\n", "csv": b"\n", "parquet": b"PAR1"}


def ends_whole(version: FileVersion, fmt: str) -> bool:
    """Whether `version` ends as a complete file of `fmt` does."""
    ending = _WHOLE_ENDINGS[fmt]
    if version.size < len(ending):
        return False
    compression = CompressionTypes.detect_compression_type(version.path)
    try:
        if compression != CompressionTypes.UNCOMPRESSED:
            # Its last bytes do not show a cut stream; reading it through does.
            return stream_ends_whole(version.path)
        with FileSystems.open(
            version.path, compression_type=CompressionTypes.UNCOMPRESSED
        ) as file:
            file.seek(version.size - len(ending))
            return file.read(len(ending)) == ending
    except OSError:
        # Gone since the listing, or unreadable: the next poll, or the read
        # once it has settled, says which.
        return False


def unlisted_versions(file_pattern: str, listed: set[str]) -> frozenset[FileVersion]:
    """What the local `file_pattern` matches besides the files `listed` by
    Beam's match, which leaves out without a word what it cannot size:
    each dangling symbolic link, as of its own modification time (read, it
    is an `unreadable_file` dead letter), and each directory, as
    `DIRECTORY_SIZE`. Hidden names are left out, as they are of the
    listing."""
    entries, directories = glob_entries(file_pattern)
    versions = {
        FileVersion(path, DIRECTORY_SIZE, 0.0)
        for path in directories
        if not is_hidden(path)
    }
    for path in entries:
        # A file that exists was written since the listing: the next one has it.
        if path in listed or is_hidden(path) or os.path.exists(path):
            continue
        with contextlib.suppress(OSError):  # gone since: nothing to read
            versions.add(FileVersion(path, 0, os.lstat(path).st_mtime))
    return frozenset(versions)


def other_paths(
    new: list[FileVersion], found: frozenset[FileVersion]
) -> dict[FileVersion, str]:
    """The versions of `new` that lead to a file `found` under another
    path, one read before or earlier in `new`'s order, each with that
    path: a symbolic link and its target, or two hard links, would have
    its records read twice. A link is listed with its target's size and
    modification time, so only versions alike in both are compared, by the
    file (device and inode) they lead to."""
    order = {version: i for i, version in enumerate(new)}
    alike = collections.defaultdict(list)
    for version in found:
        alike[version.size, version.last_updated].append(version)
    others = {}
    for group in alike.values():
        if len(group) < 2 or not any(v in order for v in group):
            continue
        first_path: dict[tuple[int, int], str] = {}
        # The versions read before (ordered -1) first, then in reading order.
        for version in sorted(group, key=lambda v: order.get(v, -1)):
            file = _file_id(version.path)
            if file is None:
                continue
            first = first_path.setdefault(file, version.path)
            if first != version.path and version in order:
                others[version] = first
    return others


def _file_id(path: str) -> tuple[int, int] | None:
    """The file a local `path` leads to (None if none: an object store's
    path, which no other path leads to, or one that cannot be reached)."""
    if "://" in path:
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino

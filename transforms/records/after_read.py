"""What becomes of a followed directory's files once they are read.

Kept by default. A directory that fills for as long as the job runs makes
every poll list, and every committed batch save, more files read: with
100,000 files read a poll took 1.27 s and its restriction was 6.1 MB
(`benchmarks/followed_directory.py`). Deleted or archived (moved into
another directory), read files leave the directory, and the followed
source forgets them.

A file is cleared only once the batch that read it is committed: the
followed source clears, at a poll, the files that the restriction it
resumed from lists as read. A batch that fails and runs again resumes from
the same restriction, so a file is never cleared before its records are
committed, and a file already cleared is simply gone.
"""

from __future__ import annotations

import dataclasses
import os
import stat

from transforms.records.followed_files import FileVersion

KEEP = "keep"
DELETE = "delete"
ARCHIVE = "archive"
ACTIONS = (KEEP, DELETE, ARCHIVE)


@dataclasses.dataclass(frozen=True)
class AfterRead:
    """`action` is `KEEP`, `DELETE`, or `ARCHIVE` into `archive_dir`, a
    directory on the followed directory's file system (files are renamed
    into it, under their own names, with `.1`, `.2`, ... added when a name
    is taken)."""

    action: str = KEEP
    archive_dir: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(
                f"after_read must be one of {', '.join(ACTIONS)}, got {self.action!r}"
            )
        if self.action == ARCHIVE and not self.archive_dir:
            raise ValueError(
                "after_read 'archive' needs an archive directory (--archive_dir)"
            )
        if self.action != ARCHIVE and self.archive_dir:
            raise ValueError(
                f"an archive directory is for after_read 'archive', not {self.action!r}"
            )

    @property
    def clears(self) -> bool:
        return self.action != KEEP

    @property
    def counter_name(self) -> str:
        """The counter of the files this policy cleared."""
        return "files_deleted" if self.action == DELETE else "files_archived"

    def clear(self, read: FileVersion) -> bool:
        """Deletes or archives the file of `read` if it is still that
        version; returns whether it did. A file replaced under the same name
        since is another, unread version, and stays. Raises OSError when the
        file system refuses."""
        try:
            now = os.stat(read.path)
        except FileNotFoundError:
            return False
        if now.st_size != read.size or now.st_mtime != read.last_updated:
            return False
        if not stat.S_ISREG(now.st_mode):
            # A FIFO, socket or device, a dead letter: not a file of
            # records the job has taken in, but someone's channel.
            return False
        if self.action == DELETE:
            os.remove(read.path)
        else:
            name = os.path.basename(read.path)
            os.rename(read.path, _free_name(self.archive_dir, name))
        return True


def _free_name(directory: str, name: str) -> str:
    """`directory/name`, or the first of `name.1`, `name.2`, ... not taken:
    an archived file is never overwritten by a later one of the same name."""
    candidate = os.path.join(directory, name)
    suffix = 0
    while os.path.lexists(candidate):
        suffix += 1
        candidate = os.path.join(directory, f"{name}.{suffix}")
    return candidate

"""Local entries a pattern matches that hold no file's records: a FIFO, a
socket or a device, refused before they are opened."""

from __future__ import annotations

import os
import stat

# A local entry that is no file of records, by what `os.stat` says it is.
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def refuse_special(path: str) -> None:
    """Raises OSError if the local `path` is a FIFO, a socket or a device:
    opening a FIFO waits for a writer, for ever if none comes (the job
    hung, a stop waiting on it), and none of them holds a file's records."""
    if "://" in path:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # opening it says why
    for is_kind, kind in _SPECIAL_FILES:
        if is_kind(mode):
            raise OSError(f"{path} is {kind}, not a regular file: not opened")

"""Files that survive a power loss once a commit says they exist.

A rename makes a file appear whole to every reader at once, but the kernel
may write the directory entry to disk before the file's bytes: after a power
loss the name is there and the file is empty or short. Where a commit record
later claims the file (a streaming batch's output part, the Photon pipeline
record, a checkpoint file), that would lose what the commit says was written,
and nothing would replay it. So the file's bytes are synced before the rename
and the directory after it, before anything claims the file.

Only local files are synced: an object store's write is durable when its
upload returns, and its file objects have no descriptor.
"""

from __future__ import annotations

import io
import os
from typing import IO


def sync_file(out: IO[bytes] | IO[str]) -> None:
    """Flushes `out` and waits until its bytes are on disk; does nothing for
    a file object with no descriptor (an object store's upload)."""
    out.flush()
    try:
        descriptor = out.fileno()
    except (AttributeError, io.UnsupportedOperation):
        return
    os.fsync(descriptor)


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Waits until the entries of the local directory `path` (a rename into
    it) are on disk; does nothing for a path that is not a local directory."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

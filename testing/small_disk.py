"""A really full file system for tests: a small tmpfs mounted on a directory.

A file system that is out of space fails a write with ENOSPC from the
kernel, wherever the write comes from (SQLite's write-ahead log, its shared
memory file, a rename's new directory entry); a mock of one error at one
call would test only the call the test thought of. Mounting needs root (or
CAP_SYS_ADMIN), which CI and the development container have; elsewhere
`mount` raises `SmallDiskUnavailable`, for the test to skip with its reason.
`ulimit -f` is no substitute: past the limit a write fails with EFBIG (and
SIGXFSZ), another error than a full disk's.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

_CHUNK = 4096  # tmpfs allocates whole pages


class SmallDiskUnavailable(RuntimeError):
    """This machine does not let the process mount a tmpfs."""


def mount(path: Path, kib: int) -> Path:
    """Mounts a tmpfs of ``kib`` KiB on ``path`` (made if need be)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SmallDiskUnavailable(
            "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): "
            + " ".join(done.stderr.split())
        )
    return path


def unmount(path: Path) -> None:
    """Unmounts ``path``; lazily, so a file a failed test left open does not
    leave the mount behind."""
    subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(disk: Path, leave: int = 0) -> Path:
    """Writes a file on ``disk`` until the disk refuses (ENOSPC), then gives
    back ``leave`` bytes of it; returns the file, whose removal frees the
    space."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * _CHUNK)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler

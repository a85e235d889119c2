"""Killing a job as a machine crash would, for the fault tests."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def kill_tree(root: int) -> None:
    """SIGKILL a process and every descendant, as a machine crash would.
    (PySpark's worker daemon runs in a process group of its own, so killing
    the job's group alone would leave its workers running.)"""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    doomed = {root}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in doomed}
        grew = not found <= doomed
        doomed |= found
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

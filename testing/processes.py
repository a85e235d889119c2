"""Killing a job, or the JVM under it, as a crash would, for the fault tests."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def kill_tree(root: int) -> None:
    """SIGKILL a process and every descendant, as a machine crash would.
    (PySpark's worker daemon runs in a process group of its own, so killing
    the job's group alone would leave its workers running.)"""
    parents = _parents()
    doomed = {root}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in doomed}
        grew = not found <= doomed
        doomed |= found
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_spark_jvm(driver: int) -> int:
    """SIGKILL the Spark JVM that the Python driver ``driver`` launched, as
    the kernel's out-of-memory killer would, and return its process id."""
    (jvm,) = [
        pid
        for pid, parent in _parents().items()
        if parent == driver and _SPARK_SUBMIT in _command_line(pid)
    ]
    os.kill(jvm, signal.SIGKILL)
    return jvm


_SPARK_SUBMIT = b"org.apache.spark.deploy.SparkSubmit"


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

"""Running a job as a subprocess whose output is kept in files, and killing
it, or the JVM under it, as a crash would, for the fault tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


class LoggedJob:
    """A command run in a session of its own (a SIGKILL of its tree leaves the
    test alone), its stdout and stderr written to `<name>-stdout.log` and
    `<name>-stderr.log` under `log_dir`. Files, not pipes: a pipe nobody reads
    while the job runs blocks the job, and its JVM's logging, once full. A
    second job of the same name appends to the same files."""

    def __init__(self, args: list[str], log_dir: Path, name: str, env: dict):
        self.stdout_path = log_dir / f"{name}-stdout.log"
        self.stderr_path = log_dir / f"{name}-stderr.log"
        self._stdout_start = _size(self.stdout_path)
        self._stderr_start = _size(self.stderr_path)
        with (
            self.stdout_path.open("a") as stdout,
            self.stderr_path.open("a") as stderr,
        ):
            self.process = subprocess.Popen(
                args, start_new_session=True, env=env, stdout=stdout, stderr=stderr
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout=timeout)

    def finish(self, timeout: float) -> tuple[str, str]:
        """Waits for the job to exit; its stdout and stderr, this run's only."""
        self.wait(timeout)
        return self.stdout(), self.stderr()

    def stdout(self) -> str:
        return _read_from(self.stdout_path, self._stdout_start)

    def stderr(self) -> str:
        return _read_from(self.stderr_path, self._stderr_start)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as file:
        file.seek(offset)
        return file.read().decode("utf-8", errors="replace")


def kill_tree(root: int) -> None:
    """SIGKILL a process and every descendant, as a machine crash would.
    (PySpark's worker daemon runs in a process group of its own, so killing
    the job's group alone would leave its workers running.)"""
    for pid in {root, *descendants(root)}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> set[int]:
    """The processes under `root`: its children, theirs, and so on."""
    parents = _parents()
    found: set[int] = set()
    grew = {root}
    while grew:
        grew = {pid for pid, parent in parents.items() if parent in grew} - found
        found |= grew
    return found


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

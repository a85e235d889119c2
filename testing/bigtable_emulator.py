"""Start a Cloud Bigtable emulator on 127.0.0.1 for tests and local runs.

``BigtableEmulator`` is a context manager. On entry it provides an emulator
from the first of these sources that is available (the order of DESIGN.md):

1. ``env``: ``$BIGTABLE_EMULATOR_HOST`` is set, so one is already running;
   it is used as is and never stopped.
2. ``cbtemulator``: Google's emulator binary on ``PATH``.
3. ``gcloud``: ``gcloud beta emulators bigtable start``.
4. ``bttest``: the local build ``.bin/bttest`` that ``bash setup.sh`` makes
   from ``testing/bigtable_emulator.go``.

It waits until the emulator answers a real gRPC call (ListTables), sets
``BIGTABLE_EMULATOR_HOST`` for the duration of the block so that every
Bigtable client created inside it talks to the emulator, and on exit restores
the variable and stops the process it started (terminate, wait, kill). All
emulators keep data in memory only: nothing survives a restart.

``python -m testing.bigtable_emulator`` runs one in the foreground and prints
the ``export`` line to use it from another shell.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from testing.processes import kill_tree

ENV_VAR = "BIGTABLE_EMULATOR_HOST"
SOURCES = ("env", "cbtemulator", "gcloud", "bttest")
LOCAL_BUILD = Path(__file__).resolve().parent.parent / ".bin" / "bttest"
_GUARD = Path(__file__).resolve().with_name("emulator_guard.py")

_log = logging.getLogger(__name__)


class EmulatorNotFound(RuntimeError):
    """None of the allowed emulator sources is available on this machine."""


class EmulatorFailed(RuntimeError):
    """An emulator process was started but did not come up."""


class _ExitedEarly(EmulatorFailed):
    """The emulator process died while starting, typically: port taken."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def emulator_command(source: str, port: int) -> list[str] | None:
    """The argv that starts ``source`` on 127.0.0.1:``port``, or None if absent."""
    if source == "cbtemulator":
        exe = shutil.which("cbtemulator")
        return [exe, "-host=127.0.0.1", f"-port={port}"] if exe else None
    if source == "gcloud":
        exe = shutil.which("gcloud")
        if not exe or not _gcloud_has_bigtable_emulator(exe):
            return None
        return [
            exe,
            "beta",
            "emulators",
            "bigtable",
            "start",
            f"--host-port=127.0.0.1:{port}",
            "--quiet",
        ]
    if source == "bttest":
        if not LOCAL_BUILD.is_file():
            return None
        return [str(LOCAL_BUILD), "-host=127.0.0.1", f"-port={port}"]
    raise ValueError(f"unknown emulator source {source!r}; expected one of {SOURCES}")


def _gcloud_has_bigtable_emulator(gcloud: str) -> bool:
    # Without the component, gcloud would try to install it (network, root)
    # instead of failing over to the next source.
    sdk_root = Path(gcloud).resolve().parent.parent
    found = (sdk_root / "platform" / "bigtable-emulator" / "cbtemulator").is_file()
    if not found:
        _log.info("gcloud at %s lacks the bigtable emulator component", gcloud)
    return found


def wait_until_serving(host: str, timeout: float) -> None:
    """Block until ``host`` answers ListTables; raise TimeoutError after ``timeout``.

    A TCP connect is not enough: gcloud's wrapper and the Go server open the
    port slightly before gRPC dispatch works, so this makes a real call.
    """
    import grpc
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
    from google.cloud.bigtable_admin_v2.services.bigtable_table_admin import (
        transports,
    )

    deadline = time.monotonic() + timeout
    channel = grpc.insecure_channel(host)
    try:
        transport = transports.BigtableTableAdminGrpcTransport(channel=channel)
        admin = BigtableTableAdminClient(transport=transport)
        parent = "projects/readiness-probe/instances/readiness-probe"
        while True:
            try:
                left = deadline - time.monotonic()
                admin.list_tables(parent=parent, retry=None, timeout=max(0.2, left))
                return
            except Exception as exc:  # any gRPC failure means "not yet"
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"Bigtable emulator at {host} did not answer within "
                        f"{timeout:.0f}s: {exc}"
                    ) from exc
                time.sleep(0.1)
    finally:
        channel.close()


class BigtableEmulator:
    """A Bigtable emulator on 127.0.0.1 for the duration of a ``with`` block.

    Attributes once entered: ``host`` ("127.0.0.1:PORT"), ``source`` (which of
    ``SOURCES`` provided it) and ``startup_seconds``.
    """

    def __init__(
        self,
        sources: Sequence[str] = SOURCES,
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        unknown = set(sources) - set(SOURCES)
        if unknown:
            raise ValueError(f"unknown emulator sources {sorted(unknown)}")
        self.sources = tuple(sources)
        self.port = port
        self.startup_timeout = startup_timeout
        self.host: str | None = None
        self.source: str | None = None
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._saved_env: str | None = None

    @property
    def pid(self) -> int | None:
        """The process id of the emulator's guard, which leads the process
        group the emulator runs in; None for one we did not start."""
        return self._process.pid if self._process else None

    def kill(self) -> None:
        """SIGKILLs the emulator we started, as a crash would: what it held
        is gone. `stop` is still due."""
        if self._process is None:
            raise RuntimeError("this BigtableEmulator started no process")
        # Process by process: gcloud's wrapper and its emulator make a
        # process group of their own, which a signal to the guard's misses.
        kill_tree(self._process.pid)

    def __enter__(self) -> BigtableEmulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Provide an emulator and point ``BIGTABLE_EMULATOR_HOST`` at it."""
        if self.host is not None:
            raise RuntimeError("this BigtableEmulator is already started")
        began = time.monotonic()
        existing = os.environ.get(ENV_VAR)
        if "env" in self.sources and existing:
            _log.info("using the running Bigtable emulator at %s=%s", ENV_VAR, existing)
            wait_until_serving(existing, self.startup_timeout)
            self.host, self.source = existing, "env"
        else:
            self._launch()
        self.startup_seconds = time.monotonic() - began
        self._saved_env = existing
        os.environ[ENV_VAR] = self.host
        _log.info(
            "Bigtable emulator (%s) ready at %s after %.2fs",
            self.source,
            self.host,
            self.startup_seconds,
        )

    def _launch(self) -> None:
        for source in self.sources:
            if source == "env" or emulator_command(source, 0) is None:
                _log.debug("Bigtable emulator source %s is not available", source)
                continue
            # A port picked by free_port() can be taken by someone else before
            # the emulator binds it; then the emulator exits and we pick again.
            for attempt in range(1, 4):
                port = self.port or free_port()
                try:
                    self._spawn(source, emulator_command(source, port), port)
                    return
                except _ExitedEarly:
                    if self.port or attempt == 3:
                        raise
                    _log.warning("emulator exited at once; retrying on a new port")
        raise EmulatorNotFound(
            f"No Bigtable emulator found (tried {', '.join(self.sources)}). Set "
            f"{ENV_VAR} to a running one, put cbtemulator or gcloud on PATH, or run "
            f"`bash setup.sh` to build {LOCAL_BUILD} from testing/bigtable_emulator.go."
        )

    def _spawn(self, source: str, argv: list[str], port: int) -> None:
        host = f"127.0.0.1:{port}"
        _log.info("starting Bigtable emulator (%s): %s", source, " ".join(argv))
        # Lives as long as the process; a pipe could fill up and block it. A
        # file with no name: a launcher killed outright leaves none behind.
        self._log_file = tempfile.TemporaryFile(prefix="bigtable-emulator-")  # noqa: SIM115
        # A new session makes a process group of the emulator: gcloud runs
        # cbtemulator as a child that would outlive a plain terminate(). Its
        # guard stops that group if this process dies without stopping it; the
        # guard's stdin is the pipe whose end only this process holds.
        self._process = subprocess.Popen(
            [sys.executable, str(_GUARD), *argv],
            stdin=subprocess.PIPE,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.host, self.source = host, source
        try:
            self._wait_for_process(host)
        except Exception as exc:
            output = self._output()
            error = _ExitedEarly if self._process.poll() is not None else EmulatorFailed
            self.stop()
            raise error(
                f"Bigtable emulator ({source}) did not start on {host}: {exc}\n"
                f"--- its output ---\n{output}"
            ) from exc
        except BaseException:  # Ctrl-C while waiting: still leave nothing behind
            self.stop()
            raise

    def _wait_for_process(self, host: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while self._process.poll() is None:
            try:
                wait_until_serving(
                    host, min(1.0, max(0.0, deadline - time.monotonic()))
                )
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
                continue
            # Answered, and by our process only if it is still alive (not a
            # stranger that holds the port while ours failed to bind).
            time.sleep(0.05)
            if self._process.poll() is None:
                return
        raise RuntimeError(f"exited with code {self._process.returncode}")

    def _output(self) -> str:
        if self._log_file is None:
            return ""
        # Read at an offset: the emulator writes through the same open file,
        # and a seek here would move where its next lines go.
        fd = self._log_file.fileno()
        size = os.fstat(fd).st_size
        tail = os.pread(fd, min(size, 16_000), max(0, size - 16_000))
        return tail.decode(errors="replace")[-4000:]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop what ``start`` started and restore ``BIGTABLE_EMULATOR_HOST``."""
        if self.host is not None and os.environ.get(ENV_VAR) == self.host:
            if self._saved_env is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = self._saved_env
        if self._process is not None:
            _log.info("stopping Bigtable emulator (%s) pid %d", self.source, self.pid)
            _stop_group(self._process, timeout)
            self._process.stdin.close()
            self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.host = None


def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _log.warning("Bigtable emulator pid %d ignored SIGTERM", process.pid)
            continue
        # The leader is gone; children (cbtemulator under gcloud) may linger.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


def main(argv: Sequence[str] | None = None) -> None:
    """Run an emulator in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None, help="default: a free one")
    parser.add_argument(
        "--source",
        choices=SOURCES[1:],
        action="append",
        help="allowed sources, in order (repeatable); default: all",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sources = args.source or SOURCES[1:]
    with BigtableEmulator(sources, port=args.port) as emulator:
        print(f"export {ENV_VAR}={emulator.host}", flush=True)
        # SIGTERM takes the same clean path as Ctrl-C; SIGINT is set too
        # because shells start background jobs with it ignored.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler)
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

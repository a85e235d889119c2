"""Start a Spark standalone cluster (one master, one worker) on 127.0.0.1.

``SparkStandaloneCluster`` is a context manager. Both daemons come from
PySpark's bundled ``bin/spark-class`` with ``SPARK_HOME`` set to the pyspark
package folder, on free loopback ports, with their logs and work directories
in a private temporary folder. On entry it waits until the worker has
registered with the master (the master's ``/json`` status page lists it
ALIVE); on exit it stops the worker, then the master (terminate, wait, kill)
and removes the folder.

``python -m testing.spark_cluster`` runs one in the foreground and prints the
master URL to pass as ``--spark_master_url``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"


class ClusterFailed(RuntimeError):
    """A daemon exited or the worker never registered."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def spark_home() -> Path:
    """PySpark's package folder, which ships ``bin/spark-class`` and jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandaloneCluster:
    """A master and one worker with ``cores`` cores and ``memory`` memory."""

    def __init__(self, cores: int = 2, memory: str = "2g") -> None:
        self.cores = cores
        self.memory = memory
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self._dir: Path | None = None
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``."""
        return f"spark://{HOST}:{self.master_port}"

    def __enter__(self) -> SparkStandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, timeout: float = 90.0) -> None:
        """Starts master and worker; returns once the worker is ALIVE."""
        self._dir = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                ["--host", HOST, "--port", str(self.master_port)],
                ["--webui-port", str(self.master_ui_port)],
            )
            self._spawn(
                "worker",
                "org.apache.spark.deploy.worker.Worker",
                ["--host", HOST, "--port", str(free_port())],
                [
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self._dir / "work"),
                    self.master_url,
                ],
            )
            self._wait_for_worker(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, cls: str, address: list[str], extra: list[str]) -> None:
        assert self._dir is not None
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=HOST,
            SPARK_LOG_DIR=str(self._dir / "logs"),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )
        log = open(self._dir / f"{name}.log", "wb")  # noqa: SIM115 - owned by Popen
        argv = [str(spark_home() / "bin" / "spark-class"), cls, *address, *extra]
        self._procs.append(
            subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Own process group: stop() signals the daemon and its children.
                start_new_session=True,
            )
        )
        log.close()

    def applications(self) -> set[str]:
        """The ids of the applications the master runs or has run: a test
        tells by them that its job ran on this cluster, not in local mode."""
        status = self._status()
        apps = [*status.get("activeapps", []), *status.get("completedapps", [])]
        return {app["id"] for app in apps}

    def _status(self) -> dict:
        """The master's status page."""
        status_url = f"http://{HOST}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(status_url, timeout=2) as response:
            return json.load(response)

    def _wait_for_worker(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise ClusterFailed(f"a Spark daemon exited:\n{self.logs()}")
            try:
                if self._status().get("aliveworkers", 0) >= 1:
                    return
            except (OSError, ValueError):
                # Not up yet: no answer, or (while its web UI starts) an
                # empty or partial page that is not JSON yet.
                pass
            time.sleep(0.5)
        raise ClusterFailed(f"no worker registered in {timeout:.0f}s:\n{self.logs()}")

    def logs(self) -> str:
        """The daemons' combined output, for failure messages."""
        if self._dir is None:
            return ""
        parts = []
        for path in sorted(self._dir.glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 15.0) -> None:
        """Stops the worker, then the master; removes the temporary folder."""
        for proc in reversed(self._procs):
            _stop_group(proc, timeout)
        self._procs.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _stop_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> None:
    """Runs a cluster until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g")
    args = parser.parse_args(argv)
    # SIGTERM (e.g. from `timeout`) must also stop the daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with SparkStandaloneCluster(args.cores, args.memory) as cluster:
        print(f"--spark_master_url={cluster.master_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt, SystemExit):
            signal.pause()


if __name__ == "__main__":
    main()

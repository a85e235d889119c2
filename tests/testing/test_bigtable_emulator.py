"""The Bigtable emulator launcher starts a real emulator and cleans up after it."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from google.cloud.bigtable.data import BigtableDataClient, SetCell

from testing.bigtable_emulator import (
    ENV_VAR,
    LOCAL_BUILD,
    BigtableEmulator,
    EmulatorNotFound,
    emulator_command,
    free_port,
    wait_until_serving,
)
from testing.processes import descendants
from transforms.millwheel.bigtable_tables import TableSpec, ensure_table

pytestmark = pytest.mark.bigtable


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone once its state is Z or absent.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _launched_sources():
    # gcloud's wrapper moves itself and its emulator into a process group of
    # their own: the case a signal to one group would miss.
    return [
        pytest.param(
            source,
            marks=pytest.mark.skipif(
                emulator_command(source, 0) is None, reason=f"no {source} here"
            ),
        )
        for source in ("bttest", "gcloud")
    ]


def _all_gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_pid_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _round_trip(project: str) -> bytes:
    ensure_table(project, "inst", TableSpec("t", {"f": None}))
    with BigtableDataClient(project=project) as client:
        table = client.get_table("inst", "t")
        table.mutate_row(b"row-1", [SetCell("f", b"q", b"hello")])
        row = table.read_row(b"row-1")
    return row.get_cells("f", b"q")[0].value


@pytest.mark.skipif(not LOCAL_BUILD.is_file(), reason="run `bash setup.sh` first")
def test_local_build_round_trip_and_cleanup(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "previous:1234")

    with BigtableEmulator(["bttest"]) as emulator:
        host = emulator.host
        processes = [emulator.pid, *descendants(emulator.pid)]
        assert emulator.source == "bttest"
        assert host.startswith("127.0.0.1:")
        assert os.environ[ENV_VAR] == host
        assert _round_trip("launcher-local") == b"hello"

    assert os.environ[ENV_VAR] == "previous:1234"
    assert _all_gone(processes, seconds=5)


@pytest.mark.skipif(not LOCAL_BUILD.is_file(), reason="run `bash setup.sh` first")
def test_a_port_taken_meanwhile_is_retried(monkeypatch):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken, free_port()])
        monkeypatch.setattr("testing.bigtable_emulator.free_port", lambda: next(ports))

        with BigtableEmulator(["bttest"]) as emulator:
            assert emulator.host != f"127.0.0.1:{taken}"
            assert _round_trip("launcher-retry") == b"hello"


def test_default_source_round_trip_and_env_removed(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    try:
        emulator = BigtableEmulator().__enter__()
    except EmulatorNotFound as exc:
        pytest.skip(str(exc))
    try:
        processes = [emulator.pid, *descendants(emulator.pid)]
        assert emulator.source in ("cbtemulator", "gcloud", "bttest")
        assert _round_trip("launcher-default") == b"hello"
    finally:
        emulator.__exit__(None, None, None)

    assert ENV_VAR not in os.environ
    assert _all_gone(processes, seconds=5)


def test_running_emulator_from_env_is_reused_and_left_running(bigtable_emulator):
    with BigtableEmulator() as reused:
        assert reused.source == "env"
        assert reused.host == bigtable_emulator.host
        assert reused.pid is None
    assert os.environ[ENV_VAR] == bigtable_emulator.host


def test_missing_sources_give_a_clear_error(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("testing.bigtable_emulator.LOCAL_BUILD", LOCAL_BUILD / "x")

    with pytest.raises(EmulatorNotFound, match="bash setup.sh"):
        BigtableEmulator().__enter__()
    assert ENV_VAR not in os.environ


def test_gcloud_command_binds_to_loopback(tmp_path, monkeypatch):
    sdk = tmp_path / "google-cloud-sdk"
    (sdk / "bin").mkdir(parents=True)
    (sdk / "bin" / "gcloud").touch()
    monkeypatch.setattr("shutil.which", lambda name: str(sdk / "bin" / name))
    assert emulator_command("gcloud", 9) is None  # component not installed

    (sdk / "platform" / "bigtable-emulator").mkdir(parents=True)
    (sdk / "platform" / "bigtable-emulator" / "cbtemulator").touch()
    assert emulator_command("gcloud", 9) == [
        str(sdk / "bin" / "gcloud"),
        "beta",
        "emulators",
        "bigtable",
        "start",
        "--host-port=127.0.0.1:9",
        "--quiet",
    ]


@pytest.mark.parametrize("source", _launched_sources())
def test_an_emulator_does_not_outlive_a_launcher_killed_outright(source, tmp_path):
    # A Photon command SIGKILLed left the emulator it started running, in a
    # session of its own, holding its port. A real launcher, a real SIGKILL.
    # It also left the emulator's log file, named in the temporary directory.
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from testing.bigtable_emulator import BigtableEmulator\n"
            f"emulator = BigtableEmulator([{source!r}])\n"
            "emulator.start()\n"
            "print(emulator.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    try:
        guard = int(launcher.stdout.readline())
        emulator = descendants(guard)
        assert emulator  # the emulator, and gcloud's wrapper around it
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    assert _all_gone([guard, *emulator], seconds=15)
    assert list(tmp_path.iterdir()) == []


def test_an_emulator_that_exits_at_once_is_reported_with_its_output(
    monkeypatch, tmp_path
):
    # Stands in for an emulator that cannot start: a real process that
    # writes a line and exits, as a binary refusing its flags would.
    failing = [
        sys.executable,
        "-c",
        "print('no such flag: -port'); raise SystemExit(2)",
    ]
    monkeypatch.setattr(
        "testing.bigtable_emulator.emulator_command", lambda source, port: failing
    )
    with pytest.raises(RuntimeError, match="no such flag: -port"):
        BigtableEmulator(["bttest"]).start()


@pytest.mark.parametrize("source", _launched_sources())
def test_a_killed_emulator_is_gone_whole_and_stops_answering(source):
    with BigtableEmulator([source]) as emulator:
        assert _round_trip(f"kill-{source}") == b"hello"
        processes = [emulator.pid, *descendants(emulator.pid)]
        emulator.kill()
        assert _all_gone(processes, seconds=5)
        with pytest.raises(TimeoutError):
            wait_until_serving(emulator.host, timeout=1)

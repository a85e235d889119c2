"""The Bigtable emulator launcher starts a real emulator and cleans up after it."""

import os
import socket

import pytest
from google.cloud.bigtable.data import BigtableDataClient, SetCell

from testing.bigtable_emulator import (
    ENV_VAR,
    LOCAL_BUILD,
    BigtableEmulator,
    EmulatorNotFound,
    emulator_command,
    free_port,
)
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
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
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
        host, pid = emulator.host, emulator.pid
        assert emulator.source == "bttest"
        assert host.startswith("127.0.0.1:")
        assert os.environ[ENV_VAR] == host
        assert _round_trip("launcher-local") == b"hello"

    assert os.environ[ENV_VAR] == "previous:1234"
    assert not _pid_alive(pid)


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
        pid = emulator.pid
        assert emulator.source in ("cbtemulator", "gcloud", "bttest")
        assert _round_trip("launcher-default") == b"hello"
    finally:
        emulator.__exit__(None, None, None)

    assert ENV_VAR not in os.environ
    assert not _pid_alive(pid)


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

"""A Bigtable the Photon commands cannot reach, or may not use, is one line.

Real subprocesses. The emulator named is a port nothing listens on; the
real Bigtable is named with no credentials on the machine (Google's client
library looks for them in the environment, gcloud's folder and the GCE
metadata server, each pointed here at nothing).
"""

import os
import socket
import subprocess
import sys

import pytest

from testing.bigtable_emulator import ENV_VAR


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(module: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _no_credentials(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR,)}
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="True")
    return env


def _last_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_an_emulator_named_but_not_running_fails_within_the_deadline(tmp_path):
    # Before, it was waited for 60 s whatever the deadline, then a traceback.
    host = f"127.0.0.1:{_closed_port()}"
    env = dict(os.environ, **{ENV_VAR: host})
    result = _run(
        "pipelines.photon",
        *("--output", str(tmp_path / "out"), "--num_queries", "5"),
        *("--set", "bigtable.deadline_seconds=2"),
        env=env,
    )
    assert result.returncode == 1
    line = _last_line(result)
    assert f"job failed: Bigtable emulator at {host} did not answer within 2s" in line
    assert f"unset {ENV_VAR}" in line


@pytest.mark.parametrize("module", ["pipelines.photon", "pipelines.photon_verify"])
def test_a_real_bigtable_without_credentials_is_refused(tmp_path, module):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "q.jsonl").write_text('{"query_id": "q1", "event_time": 1767571200000}\n')
    (logs / "c.jsonl").write_text(
        '{"click_id": "c1", "query_id": "q1", "event_time": 1767571201000}\n'
    )
    joined = tmp_path / "east"
    joined.mkdir()
    (joined / "joined-00000-of-00001.jsonl").write_text("")
    args = [
        *("--queries", str(logs / "q.jsonl"), "--clicks", str(logs / "c.jsonl")),
        *("--output", str(tmp_path / "out")),
        *("--bigtable_project", "p", "--bigtable_instance", "i"),
    ]
    if module == "pipelines.photon_verify":
        args += ["--joined", str(joined)]
    result = _run(module, *args, env=_no_credentials(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-3000:]
    assert "no Google credentials for Bigtable project 'p'" in _last_line(result)

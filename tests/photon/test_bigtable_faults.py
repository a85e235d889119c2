"""Photon when Bigtable fails: a bounded wait, a clear error, nothing trusted
that cannot be.

Each test runs its own emulator (the `bttest` build, `bash setup.sh`) so
that it can kill it with SIGKILL and start an empty one on the same port, as
an emulator restart under a running job does.
"""

import collections
import datetime
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from google.cloud.bigtable import column_family

from testing.bigtable_emulator import LOCAL_BUILD, BigtableEmulator, free_port
from testing.photon_generator import PhotonSpec, generate
from transforms.photon import BigtableTarget, ClickRef, EventStore, IdRegistry
from transforms.photon.bigtable_retry import BigtableUnavailable, TableGone
from transforms.photon.id_registry import Outcome
from transforms.photon.registry_gc import GcHorizonTooShort

pytestmark = [
    pytest.mark.bigtable,
    pytest.mark.skipif(not LOCAL_BUILD.exists(), reason="needs .bin/bttest"),
]

DEADLINE_S = 3.0
T0 = 1_767_571_200_000


def own_emulator(port):
    emulator = BigtableEmulator(("bttest",), port=port)
    emulator.start()
    return emulator


def test_a_registry_table_with_a_shorter_gc_rule_is_refused(bigtable_instance):
    table = bigtable_instance.instance().table("id_registry")
    one_day = column_family.MaxAgeGCRule(datetime.timedelta(days=1))
    table.create(column_families={"id": one_day})
    target = BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id)
    with pytest.raises(GcHorizonTooShort, match="after 1 day, .* gc_days=3"):
        IdRegistry(target, gc_days=3)
    IdRegistry(target, gc_days=1).close()  # within the table's horizon: fine


def test_an_emulator_restarted_empty_under_a_registry_is_detected():
    port = free_port()
    emulator = own_emulator(port)
    try:
        target = BigtableTarget("p", "i", deadline_s=DEADLINE_S)
        registry = IdRegistry(target, gc_days=3)
        registry.register(ClickRef("c1", T0), "A")
        emulator.kill()
        emulator.stop()
        emulator = own_emulator(port)  # same address, nothing in it
        with pytest.raises(TableGone, match="'id_registry' no longer exists"):
            registry.register(ClickRef("c2", T0), "A")
        registry.close()
    finally:
        emulator.stop()


@pytest.mark.parametrize(
    "open_store, table",
    [
        (lambda target: IdRegistry(target, gc_days=3), "id_registry"),
        (EventStore, "events"),
    ],
    ids=["registry", "event_store"],
)
def test_bigtable_unreachable_at_start_fails_within_the_deadline(
    monkeypatch, open_store, table
):
    # Nothing listens on the port: every admin call that would create the
    # table is refused, as by a Bigtable down when the job starts.
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    target = BigtableTarget("p", "i", deadline_s=DEADLINE_S)
    started = time.monotonic()
    with pytest.raises(BigtableUnavailable) as raised:
        open_store(target)
    took = time.monotonic() - started
    assert f"table {table!r}: create table kept failing" in str(raised.value)
    assert f"deadline {DEADLINE_S:g} s" in str(raised.value)
    # Google's admin client alone retried for about 60 s, then raised its
    # own RetryError.
    assert took < DEADLINE_S + 5, took


def test_bigtable_that_comes_up_within_the_deadline_is_waited_for(monkeypatch):
    port = free_port()
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{port}")
    target = BigtableTarget("p", "i", deadline_s=60.0)
    emulator = BigtableEmulator(("bttest",), port=port)
    # The emulator starts while the registry's first admin calls are failing.
    starting = threading.Timer(1.0, emulator.start)
    starting.start()
    try:
        registry = IdRegistry(target, gc_days=3)
        assert registry.register(ClickRef("c1", T0), "A") is Outcome.REGISTERED
        registry.close()
    finally:
        starting.join()
        emulator.stop()


@pytest.mark.slow
def test_emulator_killed_mid_run_fails_within_the_deadline_then_rerun_is_exact(
    tmp_path,
):
    logs = generate(PhotonSpec(num_queries=120, bad_lines=0), seed=31)
    queries, clicks = logs.write(tmp_path / "logs")
    port = free_port()
    emulator = own_emulator(port)
    env = dict(
        os.environ, PYTHONWARNINGS="ignore", BIGTABLE_EMULATOR_HOST=emulator.host
    )

    def photon(output):
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "pipelines.photon"),
                *("--queries", str(queries), "--clicks", str(clicks)),
                *("--output", str(output), "--now_ms", str(logs.now_ms)),
                *("--bigtable_project", "p", "--bigtable_instance", "i"),
                *("--set", f"bigtable.deadline_seconds={DEADLINE_S}"),
                *("--set", "registry.max_batch=20"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    try:
        registry = IdRegistry(BigtableTarget("p", "i"), gc_days=3)
        refs = [ClickRef(c.click_id, c.event_time) for c in logs.clicks]
        first = photon(tmp_path / "first")
        while not registry.owners(refs):  # kill once registering has begun
            assert first.poll() is None, first.communicate()[1][-2000:]
            time.sleep(0.02)
        registry.close()
        emulator.kill()
        killed_at = time.monotonic()
        _, stderr = first.communicate(timeout=120)
        took = time.monotonic() - killed_at
        assert first.returncode == 1
        last = stderr.strip().splitlines()[-1]
        assert "job failed: Bigtable table" in last
        assert "kept failing for" in last and f"deadline {DEADLINE_S:g} s" in last
        assert took < DEADLINE_S + 30, took  # the deadline, plus shutting down

        emulator.stop()
        emulator = own_emulator(port)  # back, empty, as an emulator restarts
        rerun = photon(tmp_path / "rerun")
        stdout, stderr = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, stderr[-3000:]
        joined = collections.Counter(
            json.loads(line)["click"]["click_id"]
            for path in (tmp_path / "rerun").glob("joined*.jsonl")
            for line in path.read_text().splitlines()
        )
        assert set(joined) == set(logs.joinable)
        assert set(joined.values()) == {1}
    finally:
        emulator.stop()

"""Photon under real faults: processes killed with SIGKILL, then run again.

The pipelines and the verifier run as the user runs them, in subprocesses,
against the real Bigtable emulator; a fault is a real `SIGKILL`, sent at a
moment chosen by watching the registry from outside, never a hook in the
code under test. Expected values come from the generator's ground truth.
"""

import collections
import json
import pathlib
import random
import signal
import time

import pytest

from testing.photon_generator import PhotonSpec, generate
from tests.photon.test_photon_cli import (
    GC_DAYS,
    click_ids,
    finish,
    pipeline_args,
    run_crashing,
    start_cli,
)
from transforms.photon import BigtableTarget, ClickRef, IdRegistry
from transforms.photon.id_registry import pipeline_token

pytestmark = [pytest.mark.bigtable, pytest.mark.slow]

SEED = 23


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    # Duplicated clicks are re-logged copies with their own record ids: a
    # restarted run may meet them in another order than the killed one.
    spec = PhotonSpec(num_queries=120, duplicate_fraction=0.2, bad_lines=2)
    generated = generate(spec, seed=SEED)
    folder = tmp_path_factory.mktemp("logs")
    queries, clicks = generated.write(folder)
    truth = json.loads((folder / "truth.json").read_text())
    refs = {}
    for line in clicks.read_text().splitlines():
        try:
            row = json.loads(line)
            refs[row["click_id"]] = ClickRef(row["click_id"], row["event_time"])
        except (ValueError, KeyError, TypeError):
            continue  # the log's bad lines
    return {
        "queries": str(queries),
        "clicks": str(clicks),
        "truth": truth,
        "refs": refs,
    }


@pytest.fixture
def registry(bigtable_instance):
    registry = IdRegistry(
        BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id),
        GC_DAYS,
    )
    yield registry
    registry.close()


def verify_args(logs, bigtable_instance, joined, output):
    return (
        *("--queries", logs["queries"], "--clicks", logs["clicks"]),
        *[arg for directory in joined for arg in ("--joined", str(directory))],
        *("--output", str(output)),
        *("--bigtable_project", bigtable_instance.project),
        *("--bigtable_instance", bigtable_instance.instance_id),
        *("--now_ms", str(logs["truth"]["now_ms"])),
    )


def kill_when(process, condition, timeout_s=120.0):
    """SIGKILL `process` as soon as `condition()` holds; True if it was
    still running then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if condition():
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=30)
            return process.returncode == -signal.SIGKILL
        time.sleep(0.02)
    process.kill()
    raise AssertionError("the condition never held")


def joined_union(*folders):
    return collections.Counter(
        click_id
        for folder in folders
        for path in [folder, *sorted(folder.glob("run-*"))]
        for click_id in click_ids(path, "joined")
    )


def test_pipeline_killed_at_a_random_point_then_restarted_and_verified(
    logs, bigtable_instance, registry, tmp_path
):
    rng = random.Random(SEED)
    out = tmp_path / "east"
    args = pipeline_args(logs, bigtable_instance, out, "east")
    refs = list(logs["refs"].values())
    # Kill once a random number of clicks are registered: registrations are
    # flushed 20 at a time, all before the output is written at the end.
    threshold = rng.randrange(1, len(logs["truth"]["joinable"]) // 2)

    def registered_enough():
        return len(registry.owners(refs)) >= threshold

    process = start_cli("pipelines.photon", *args)
    assert kill_when(process, registered_enough), "the run ended before the kill"
    assert not list(out.glob("joined*.jsonl")), "the kill came after the output"
    assert registry.owners(refs), "the kill came before any registration"

    finish(start_cli("pipelines.photon", *args))  # the restart, same token
    verified = tmp_path / "verify"
    finish(
        start_cli(
            "pipelines.photon_verify",
            *verify_args(logs, bigtable_instance, [out], verified),
        )
    )
    union = joined_union(out, verified)
    assert set(union) == set(logs["truth"]["joinable"])
    assert set(union.values()) == {1}


def test_verify_killed_midway_then_rerun_joins_each_click_once(
    logs, bigtable_instance, registry, tmp_path
):
    crashed = tmp_path / "crashed"
    run_crashing(logs, bigtable_instance, crashed)
    joinable = set(logs["truth"]["joinable"])
    lost = [logs["refs"][c] for c in joinable - set(click_ids(crashed, "joined"))]
    assert lost, "the fault injection lost no click"

    def none_held_by_east():
        # Verification has changed every lost click's registration.
        return "east" not in set(map(pipeline_token, registry.owners(lost).values()))

    verified = tmp_path / "verify"
    args = verify_args(logs, bigtable_instance, [crashed], verified)
    process = start_cli("pipelines.photon_verify", *args)
    assert kill_when(process, none_held_by_east), "verify ended before the kill"
    assert not list(verified.glob("run-*/joined*.jsonl")), "killed after its output"

    finish(start_cli("pipelines.photon_verify", *args))  # the rerun
    union = joined_union(crashed, verified)
    assert set(union) == joinable
    assert set(union.values()) == {1}

    # Once more, into another directory and without being told of the first:
    # the verifier's token says where it wrote, so nothing is joined again.
    elsewhere = tmp_path / "verify-again"
    finish(
        start_cli(
            "pipelines.photon_verify",
            *verify_args(logs, bigtable_instance, [crashed], elsewhere),
        )
    )
    assert not joined_union(elsewhere)
    assert set(joined_union(crashed, verified, elsewhere).values()) == {1}


def test_two_pipelines_proven_to_overlap_output_each_click_once(
    logs, bigtable_instance, registry, tmp_path
):
    outputs = {name: tmp_path / name for name in ("east", "west")}
    # The same clicks, east's in reverse order: the two meet in the middle,
    # each winning some while the other runs, rather than one winning all.
    reversed_log = tmp_path / "clicks-reversed.jsonl"
    lines = pathlib.Path(logs["clicks"]).read_text().splitlines()
    reversed_log.write_text("\n".join(reversed(lines)) + "\n")
    east_logs = dict(logs, clicks=str(reversed_log))
    # One registration per flush: a pipeline's registering takes long enough
    # to be seen, and paused, before it has won every click.
    running = {
        name: start_cli(
            "pipelines.photon",
            *pipeline_args(
                east_logs if name == "east" else logs, bigtable_instance, out, name
            ),
            *("--set", "registry.max_batch=1"),
        )
        for name, out in outputs.items()
    }
    refs = list(logs["refs"].values())
    # Watched from outside: a pipeline's registrations that grew while the
    # other process was alive prove that they overlapped. The first to
    # register is paused with SIGSTOP (a real stall, as a loaded machine
    # makes) until the other registers too, so that neither wins them all.
    counts = {name: 0 for name in running}
    grew_while_other_ran = {name: False for name in running}
    paused = None
    while any(p.poll() is None for p in running.values()):
        holders = collections.Counter(
            map(pipeline_token, registry.owners(refs).values())
        )
        for name, other in (("east", "west"), ("west", "east")):
            if holders[name] > counts[name] and running[other].poll() is None:
                grew_while_other_ran[name] = True
            counts[name] = holders[name]
        if paused is None and sum(counts.values()) and not all(counts.values()):
            paused = next(name for name, count in counts.items() if count)
            running[paused].send_signal(signal.SIGSTOP)
        elif paused and (
            all(counts.values()) or any(p.poll() is not None for p in running.values())
        ):
            running[paused].send_signal(signal.SIGCONT)
            paused = ""  # once only
        time.sleep(0.02)
    for process in running.values():
        finish(process)
    assert grew_while_other_ran == {"east": True, "west": True}, counts
    union = joined_union(*outputs.values())
    assert set(union) == set(logs["truth"]["joinable"])
    assert set(union.values()) == {1}

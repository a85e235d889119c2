"""`python -m pipelines.photon` and `photon_verify` end to end, in subprocesses.

Expected values come from the generator's ground truth (`truth.json`), never
from the code under test.
"""

import collections
import json
import os
import socket
import subprocess
import sys
import types

import pytest

from pipelines.output_pipelines import RECORD, record_pipeline
from pipelines.photon import gc_horizon_warning
from testing.photon_generator import PhotonSpec, generate
from transforms.photon import BigtableTarget, ClickRef, IdRegistry
from transforms.photon.id_registry import pipeline_token
from transforms.photon.params import RegistryParams
from transforms.photon.pipeline_lease import PipelineLease

pytestmark = [pytest.mark.bigtable, pytest.mark.slow]

GC_DAYS = 3


def start_cli(module, *args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(process):
    stdout, stderr = process.communicate(timeout=300)
    if process.returncode != 0:
        pytest.fail(f"CLI failed ({process.returncode}):\n{stderr[-3000:]}")
    return stdout


def run_cli(module, *args):
    return finish(start_cli(module, *args))


def read_jsonl(folder, name):
    rows = []
    for path in sorted(folder.glob(f"{name}*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line]
    return rows


def logged_clicks(logs):
    """The click log's well-formed lines (it holds some bad ones)."""
    clicks = []
    with open(logs["clicks"]) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        try:
            clicks.append(json.loads(line))
        except ValueError:
            continue
    return [c for c in clicks if isinstance(c, dict) and "click_id" in c]


def click_ids(folder, name):
    return [row["click"]["click_id"] for row in read_jsonl(folder, name)]


def summary_value(stdout, label):
    line = next(line for line in stdout.splitlines() if line.startswith(label))
    return int(line[len(label) :].split()[0])


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    spec = PhotonSpec(
        num_queries=150, old_clicks=2, old_age_days=GC_DAYS + 7, bad_lines=3
    )
    generated = generate(spec, seed=5)
    folder = tmp_path_factory.mktemp("logs")
    queries, clicks = generated.write(folder)
    truth = json.loads((folder / "truth.json").read_text())
    return {"queries": str(queries), "clicks": str(clicks), "truth": truth}


def pipeline_args(logs, bigtable_instance, output, pipeline_id, *extra):
    return (
        "--queries",
        logs["queries"],
        "--clicks",
        logs["clicks"],
        "--output",
        str(output),
        "--bigtable_project",
        bigtable_instance.project,
        "--bigtable_instance",
        bigtable_instance.instance_id,
        "--pipeline_id",
        pipeline_id,
        "--now_ms",
        str(logs["truth"]["now_ms"]),
        "--gc_days",
        str(GC_DAYS),
        # Small batches interleave the two pipelines' registrations.
        "--set",
        "registry.max_batch=20",
        *extra,
    )


@pytest.mark.parametrize("west_runner", ["DirectRunner", "SparkRunner"])
def test_two_concurrent_pipelines_output_each_click_once(
    logs, bigtable_instance, tmp_path, west_runner
):
    # With SparkRunner, "west" is this project's runner on local[2], joining
    # and registering against the same tables as "east" on the DirectRunner.
    outputs = {name: tmp_path / name for name in ("east", "west")}
    runner_args = {
        "east": ["--runner=DirectRunner"],
        "west": [f"--runner={west_runner}", "--spark_master_url=local[2]"],
    }
    running = [
        start_cli(
            "pipelines.photon",
            *pipeline_args(logs, bigtable_instance, out, name, *runner_args[name]),
        )
        for name, out in outputs.items()
    ]
    stdouts = [finish(process) for process in running]

    truth = logs["truth"]
    joined = collections.Counter(
        click_id for out in outputs.values() for click_id in click_ids(out, "joined")
    )
    assert set(joined) == set(truth["joinable"])
    assert set(joined.values()) == {1}
    # Both joined every click; each click's loser wasted its join.
    wasted = collections.Counter(
        click_id for out in outputs.values() for click_id in click_ids(out, "wasted")
    )
    assert wasted == collections.Counter(truth["joinable"].keys())
    assert sum(summary_value(s, "wasted joins") for s in stdouts) == len(
        truth["joinable"]
    )
    for out, stdout in zip(outputs.values(), stdouts, strict=True):
        unjoinable = {
            (row["click"]["click_id"], row["reason"])
            for row in read_jsonl(out, "unjoinable")
        }
        assert unjoinable == {
            *((c, "QUERY_NOT_FOUND") for c in truth["orphans"]),
            *((c, "OLDER_THAN_GC_HORIZON") for c in truth["too_old"]),
        }
        assert len(read_jsonl(out, "dead_letters")) == truth["bad_lines"]
        assert summary_value(stdout, "duplicate clicks") == truth["duplicates"]


def test_a_pipeline_under_the_id_of_a_running_one_is_refused_in_one_line(
    logs, bigtable_instance, tmp_path
):
    # The running pipeline is its lease, held here as a pipeline on another
    # host would hold it: under one id both would output every click.
    target = BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id)
    running = PipelineLease(target, GC_DAYS, "east", "other-host:/outputs/east")
    try:
        running.acquire()
        refused = start_cli(
            "pipelines.photon",
            *pipeline_args(logs, bigtable_instance, tmp_path / "east", "east"),
        )
        _, stderr = refused.communicate(timeout=300)
    finally:
        running.close()
    assert refused.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    (line,) = [line for line in stderr.splitlines() if "job failed" in line]
    assert (
        "job failed: pipeline id 'east' is in use by another running pipeline "
        "(other-host:/outputs/east, renewed"
    ) in line
    assert not list((tmp_path / "east").glob("joined*")), "it ran"


def run_crashing(logs, bigtable_instance, output):
    """Pipeline "east", which loses (registers, never outputs) about 30% of
    the clicks it registers, as a crash between commit and write would."""
    run_cli(
        "pipelines.photon",
        *pipeline_args(
            logs,
            bigtable_instance,
            output,
            "east",
            "--fail_after_register_fraction",
            "0.3",
        ),
    )


def crash_losing_clicks(logs, bigtable_instance, output):
    """`run_crashing` into `output`: the joinable clicks, and those it lost."""
    run_crashing(logs, bigtable_instance, output)
    joinable = set(logs["truth"]["joinable"])
    lost = joinable - set(click_ids(output, "joined"))
    assert lost, "the fault injection lost no click"
    return joinable, lost


def assert_each_once(joinable, joined_ids):
    union = collections.Counter(joined_ids)
    assert set(union) == joinable
    assert set(union.values()) == {1}


def test_verify_restores_clicks_lost_between_commit_and_write(
    logs, bigtable_instance, tmp_path
):
    crashed, verified = tmp_path / "crashed", tmp_path / "verified"
    joinable, lost = crash_losing_clicks(logs, bigtable_instance, crashed)

    stdout = run_cli(
        "pipelines.photon_verify",
        "--queries",
        logs["queries"],
        "--clicks",
        logs["clicks"],
        "--joined",
        str(crashed),
        "--output",
        str(verified),
        "--bigtable_project",
        bigtable_instance.project,
        "--bigtable_instance",
        bigtable_instance.instance_id,
        "--now_ms",
        str(logs["truth"]["now_ms"]),
    )
    assert summary_value(stdout, "registered, not output") == len(lost)
    assert summary_value(stdout, "taken over") == len(lost)
    restored = click_ids(verified / "run-0001", "joined")
    assert sorted(restored) == sorted(lost)
    assert_each_once(joinable, click_ids(crashed, "joined") + restored)


def test_verify_leaves_lost_clicks_past_the_gc_horizon_with_their_holders(
    logs, bigtable_instance, tmp_path
):
    # Before, a verification whose age clock was weeks past the logs' time
    # (the wall clock, on logs replayed late) took every lost click over and
    # set it aside as too old: it said 0 re-joined, exit 0, no warning.
    crashed, verified = tmp_path / "crashed", tmp_path / "verified"
    joinable, lost = crash_losing_clicks(logs, bigtable_instance, crashed)
    weeks_later = logs["truth"]["now_ms"] + 30 * 86_400_000
    late = verify_cli(
        logs,
        bigtable_instance,
        verified,
        "--joined",
        str(crashed),
        "--now_ms",
        str(weeks_later),  # the last --now_ms given counts
    )
    stdout, stderr = late.communicate(timeout=300)
    assert late.returncode == 0, stderr[-3000:]
    assert summary_value(stdout, "older than the GC horizon") == len(lost)
    assert summary_value(stdout, "taken over") == 0
    assert f"{len(lost)} clicks registered but in no output are older" in stderr
    assert "--now_ms near their time" in stderr
    assert not list(verified.glob("run-*"))

    stdout = finish(
        verify_cli(logs, bigtable_instance, verified, "--joined", str(crashed))
    )
    assert summary_value(stdout, "older than the GC horizon") == 0
    assert summary_value(stdout, "taken over") == len(lost)
    restored = click_ids(verified / "run-0001", "joined")
    assert_each_once(joinable, click_ids(crashed, "joined") + restored)


def test_verify_restores_a_click_registered_under_an_occurrence_token(
    bigtable_instance, tmp_path
):
    # The joiner registers a click it may have forgotten under its pipeline's
    # token and an occurrence ("east#gc..."). The verifier took that holder
    # for a pipeline whose output it was not given and refused the whole
    # run, --lost_output east or not: none of east's lost clicks came back.
    t0 = 1_767_571_200_000
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"query_id": "q1", "event_time": t0}) + "\n"
    )
    (tmp_path / "clicks.jsonl").write_text(
        "".join(
            json.dumps({"click_id": c, "query_id": "q1", "event_time": t0 + i}) + "\n"
            for i, c in enumerate(["c1", "c2"], start=5)
        )
    )
    east = tmp_path / "east"  # an output that lost both clicks
    east.mkdir()
    record_pipeline(east, "east")
    registry = IdRegistry(
        BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id),
        GC_DAYS,
    )
    try:
        registry.register_many(
            [ClickRef("c1", t0 + 5, "gc1767578400000"), ClickRef("c2", t0 + 6)], "east"
        )
    finally:
        registry.close()
    stdout = run_cli(
        "pipelines.photon_verify",
        *("--queries", str(tmp_path / "queries.jsonl")),
        *("--clicks", str(tmp_path / "clicks.jsonl")),
        *("--joined", str(east), "--output", str(tmp_path / "verified")),
        *("--bigtable_project", bigtable_instance.project),
        *("--bigtable_instance", bigtable_instance.instance_id),
        *("--now_ms", str(t0 + 3_600_000)),
    )
    assert summary_value(stdout, "taken over") == 2
    restored = click_ids(tmp_path / "verified" / "run-0001", "joined")
    assert sorted(restored) == ["c1", "c2"]


def test_the_too_old_warning_counts_the_clicks_another_pipeline_joined_first():
    # West lost every race to east: 0 joined, 1,504 wasted, 3 too old. It
    # warned that its clicks were mostly too old, and to pass --now_ms,
    # which it had.
    registry = RegistryParams(now_ms=1_767_578_400_000)

    def totals(too_old, joined, wasted):
        return {
            "millwheel.photon/unjoinable_older_than_gc_horizon": too_old,
            "millwheel.photon/clicks_joined": joined,
            "millwheel.photon/wasted_joins": wasted,
        }

    assert gc_horizon_warning(totals(3, 0, 1504), registry) is None
    warned = gc_horizon_warning(totals(1504, 2, 1), registry)
    assert warned.startswith("1504 clicks were older than the GC horizon")


def verify_cli(logs, bigtable_instance, output, *extra):
    return start_cli(
        "pipelines.photon_verify",
        *("--queries", logs["queries"], "--clicks", logs["clicks"]),
        *("--output", str(output)),
        *("--bigtable_project", bigtable_instance.project),
        *("--bigtable_instance", bigtable_instance.instance_id),
        *("--now_ms", str(logs["truth"]["now_ms"])),
        *extra,
    )


def test_verify_refuses_outputs_that_are_not_the_registering_pipelines(
    logs, bigtable_instance, tmp_path
):
    # Given a wrong --joined directory, every click the right one holds
    # would look lost, and re-joining them would output each twice.
    crashed = tmp_path / "crashed"
    run_crashing(logs, bigtable_instance, crashed)
    record = json.loads((crashed / RECORD).read_text())
    assert record["pipeline_ids"] == ["east"]
    assert len(record["output_id"]) == 32
    registry = IdRegistry(
        BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id),
        GC_DAYS,
    )
    refs = [
        ClickRef(row["click"]["click_id"], row["click"]["event_time"])
        for row in read_jsonl(crashed, "joined")
    ]
    before = registry.owners(refs)
    assert set(map(pipeline_token, before.values())) == {"east"}

    empty = tmp_path / "typo"
    empty.mkdir()
    north = tmp_path / "north"
    north.mkdir()
    record_pipeline(north, "north")
    for joined, expected in [
        (empty, f"--joined '{empty}' holds no Photon output"),
        (north, "of 'east') were registered by pipelines whose output is not"),
    ]:
        process = verify_cli(
            logs, bigtable_instance, tmp_path / "v", "--joined", str(joined)
        )
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr, stderr
        assert expected in stderr.strip().splitlines()[-1]
        assert registry.owners(refs) == before, "the refusal came after a take-over"
        assert not list((tmp_path / "v").glob("run-*")), "it joined clicks"

    # Said to be gone for good, east's output is not needed: every click
    # east holds is re-joined, those `crashed` has included.
    stdout = finish(
        verify_cli(
            logs,
            bigtable_instance,
            tmp_path / "v",
            *("--joined", str(north), "--lost_output", "east"),
        )
    )
    registry.close()
    rejoined = set(click_ids(tmp_path / "v" / "run-0001", "joined"))
    assert {ref.click_id for ref in refs} <= rejoined
    assert summary_value(stdout, "taken over") == len(rejoined)


def test_verify_refuses_an_output_of_the_same_id_written_against_another_registry(
    logs, bigtable_instance, tmp_path
):
    # An earlier output of "east", joined from other logs against another
    # registry, records the same pipeline id as the real one. Given it, the
    # verifier took every click east holds here for lost, re-joined them,
    # and so output each twice.
    other_registry = types.SimpleNamespace(
        project=bigtable_instance.project,
        instance_id=f"{bigtable_instance.instance_id}-other",
    )
    other_logs = tmp_path / "other_logs"
    other_logs.mkdir()
    generated = generate(PhotonSpec(num_queries=40), seed=6)
    queries, clicks = generated.write(other_logs)
    other_truth = json.loads((other_logs / "truth.json").read_text())
    earlier = tmp_path / "earlier"
    run_cli(
        "pipelines.photon",
        *pipeline_args(
            {"queries": str(queries), "clicks": str(clicks), "truth": other_truth},
            other_registry,
            earlier,
            "east",
        ),
    )
    crashed = tmp_path / "crashed"
    joinable, _ = crash_losing_clicks(logs, bigtable_instance, crashed)
    registry = IdRegistry(
        BigtableTarget(bigtable_instance.project, bigtable_instance.instance_id),
        GC_DAYS,
    )
    refs = [
        ClickRef(click["click_id"], click["event_time"])
        for click in logged_clicks(logs)
        if click["click_id"] in joinable
    ]
    before = registry.owners(refs)

    process = verify_cli(
        logs, bigtable_instance, tmp_path / "v", "--joined", str(earlier)
    )
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 2, stderr[-3000:]
    refusal = stderr.strip().splitlines()[-1]
    assert f"--joined '{earlier}' records pipeline 'east', but is none of" in refusal
    assert f"pipeline 'east' also wrote to {socket.gethostname()}:{crashed}" in refusal
    assert registry.owners(refs) == before, "the refusal came after a take-over"
    registry.close()
    assert not list((tmp_path / "v").glob("run-*")), "it joined clicks"

    # Given the output east wrote here, it restores exactly the lost clicks.
    verified = tmp_path / "v"
    finish(verify_cli(logs, bigtable_instance, verified, "--joined", str(crashed)))
    restored = click_ids(verified / "run-0001", "joined")
    assert_each_once(joinable, click_ids(crashed, "joined") + restored)


def test_generated_run_matches_its_ground_truth(tmp_path):
    # No inputs, no Bigtable: the job generates logs and brings an emulator
    # (or uses $BIGTABLE_EMULATOR_HOST), then checks itself against the truth.
    stdout = run_cli(
        "pipelines.photon", "--output", str(tmp_path), "--num_queries", "60"
    )
    truth = json.loads((tmp_path / "generated" / "truth.json").read_text())
    assert summary_value(stdout, "joinable clicks (truth)") == len(truth["joinable"])
    assert summary_value(stdout, "joined exactly once") == len(truth["joinable"])
    assert summary_value(stdout, "missing") == 0
    assert summary_value(stdout, "output more than once") == 0
    assert sorted(click_ids(tmp_path, "joined")) == sorted(truth["joinable"])
    # The Joiner's joins, of which the registry kept the clicks joined.
    made = summary_value(stdout, "joins made")
    assert made == summary_value(stdout, "  with the query in state") + summary_value(
        stdout, "  with the query from the event store"
    )
    assert made >= summary_value(stdout, "clicks joined") == len(truth["joinable"])


def test_logs_older_than_the_gc_horizon_by_the_wall_clock_get_a_warning(
    logs, bigtable_instance, tmp_path
):
    # The logs are of January 2026: by the wall clock (no --now_ms), every
    # click is older than the horizon. They are counted, and the user told.
    # A registry of its own: one where a run had registered some of these
    # clicks as this pipeline's would have them output again.
    process = start_cli(
        "pipelines.photon",
        *("--queries", logs["queries"], "--clicks", logs["clicks"]),
        *("--output", str(tmp_path / "out"), "--gc_days", str(GC_DAYS)),
        *("--bigtable_project", bigtable_instance.project),
        *("--bigtable_instance", bigtable_instance.instance_id),
    )
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    assert summary_value(stdout, "clicks joined") == 0
    too_old = summary_value(stdout, "unjoinable: older than GC")
    assert too_old >= len(logs["truth"]["joinable"])
    horizon = f"older than the GC horizon ({GC_DAYS} days before the wall clock)"
    assert f"{too_old} clicks were {horizon}" in stderr
    assert "--now_ms" in stderr


def test_a_rerun_whose_registry_is_gone_is_warned_of(logs, bigtable_instance, tmp_path):
    # Its earlier run's registrations are lost with the table (deleted here;
    # an emulator restarted empty does the same): a duplicate of a click it
    # joined then, or the same click in another pipeline, is joined again.
    output = tmp_path / "east"
    args = pipeline_args(logs, bigtable_instance, output, "east")
    warning = "has written to"

    def stderr_of_a_run():
        process = start_cli("pipelines.photon", *args)
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        return stderr

    assert warning not in stderr_of_a_run()  # a first run: nothing to lose
    assert warning not in stderr_of_a_run()  # the registry kept
    bigtable_instance.instance().table("id_registry").delete()
    lines = [line for line in stderr_of_a_run().splitlines() if warning in line]
    assert len(lines) == 1
    assert "pipeline 'east' has written to" in lines[0]
    assert "id registry table 'id_registry' does not exist" in lines[0]

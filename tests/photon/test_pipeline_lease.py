"""The pipeline lease on the Bigtable emulator: one running pipeline per id."""

import os
import subprocess
import threading
import time

import pytest

from tests.photon.joining import target_of
from transforms.photon.bigtable_retry import TableGone
from transforms.photon.pipeline_lease import (
    Holding,
    PipelineIdInUse,
    PipelineLease,
    outputs_written,
)

GC_DAYS = 3
LEASE_S = 30.0


@pytest.fixture
def lease(bigtable_instance):
    """Makes leases on the test's instance; closes them after the test."""
    made = []

    def make(holder, token="east", lease_s=LEASE_S, **kwargs):
        target = target_of(bigtable_instance)
        made.append(
            PipelineLease(target, GC_DAYS, token, holder, lease_s=lease_s, **kwargs)
        )
        return made[-1]

    yield make
    for one in made:
        one.close()


def later(seconds):
    """A clock `seconds` ahead of the wall clock: how a lease looks to a
    pipeline starting that much later."""
    return lambda: time.time_ns() // 1_000_000 + int(seconds * 1000)


def test_a_second_holder_is_refused_naming_the_first(lease):
    first = lease("host-a:/out/east")
    first.acquire()
    second = lease("host-b:/out/east2")
    with pytest.raises(PipelineIdInUse, match=r"'east' is in use .*host-a:/out/east,"):
        second.acquire()
    # Another id is another lease.
    lease("host-b:/out/west", token="west").acquire()


def test_the_same_holder_takes_its_id_again_at_once(lease):
    # A restart after a crash: the lease it held is still fresh.
    lease("host-a:/out/east").acquire()
    lease("host-a:/out/east").acquire()


def test_an_id_not_renewed_for_the_lease_is_free(lease):
    crashed = lease("host-a:/out/east")
    crashed.acquire()
    too_soon = lease("host-b:/out/east", clock_ms=later(LEASE_S - 5))
    with pytest.raises(PipelineIdInUse, match="free 30 s after its last renewal"):
        too_soon.acquire()
    lease("host-b:/out/east", clock_ms=later(LEASE_S + 1)).acquire()
    # The first, back from its stall, finds the id taken.
    assert not crashed.renew()


def test_a_released_id_is_free_at_once(lease):
    first = lease("host-a:/out/east")
    first.acquire()
    first.release()
    lease("host-b:/out/east").acquire()


def test_of_pipelines_starting_together_one_takes_the_id(lease):
    leases = [lease(f"host-{i}:/out") for i in range(4)]
    outcomes = []
    start = threading.Barrier(len(leases))

    def acquire(one):
        start.wait()
        try:
            one.acquire()
            outcomes.append("held")
        except PipelineIdInUse:
            outcomes.append("refused")

    threads = [threading.Thread(target=acquire, args=(one,)) for one in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["held", "refused", "refused", "refused"]


def test_a_held_id_is_renewed_while_the_block_runs_and_freed_after(lease):
    # Renewed every 0.5 s. Seen from a clock 0.5 s ahead, a lease renewed
    # is at most about 1 s old; one not renewed for the 3 s below, 3.5 s.
    running = lease("host-a:/out", lease_s=1.5)
    ahead = lease("host-b:/out", lease_s=1.5, clock_ms=later(0.5))
    with running.held() as lost:
        time.sleep(3.0)
        with pytest.raises(PipelineIdInUse):
            ahead.acquire()
        assert not lost.is_set()
    ahead.acquire()


def test_a_holder_whose_id_was_taken_finds_out_at_its_next_renewal(lease):
    running = lease("host-a:/out", lease_s=1.5)
    with running.held() as lost:
        # Seen from 2 s ahead the lease has run out, as it has for a
        # pipeline that starts while host-a is stalled.
        lease("host-b:/out", lease_s=1.5, clock_ms=later(2.0)).acquire()
        assert lost.wait(timeout=3.0), "renewed every 0.5 s, yet never found out"
    assert isinstance(running.lost_because, PipelineIdInUse)
    assert "was taken by another pipeline" in str(running.lost_because)
    # Its end leaves the new holder's lease alone.
    with pytest.raises(PipelineIdInUse, match="host-b:/out"):
        lease("host-c:/out").acquire()


def test_a_renewal_applied_after_it_timed_out_is_still_this_holders(lease):
    # The renewal's attempt timed out while Bigtable stalled, and was
    # applied once it resumed: the cell holds a later value of this holder
    # than the one last known written. Before, the next renewal took that
    # for another pipeline's and stopped the only pipeline running.
    holder = lease("host-a:/out/east")
    holder.acquire()
    # The late write: this holder's, of a later time.
    lease("host-a:/out/east", clock_ms=later(5)).acquire()
    assert holder.renew()
    assert holder.renew()
    # Another holder's value is still another pipeline's.
    lease("host-b:/out/east", clock_ms=later(LEASE_S + 1)).acquire()
    assert not holder.renew()


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_a_holder_whose_table_lost_the_lease_stops_with_table_gone(
    lease, bigtable_instance, how
):
    # An emulator restarted empty under the job: the table is gone, or, once
    # a task of the job opened the registry, there again but empty. Before,
    # the first went unnoticed (each renewal failed, a warning) and the
    # second read as another pipeline taking the id.
    running = lease("host-a:/out", lease_s=1.5)
    table = bigtable_instance.instance().table("id_registry")
    with running.held() as lost:
        if how == "emptied":
            table.truncate()
        else:
            table.delete()
        assert lost.wait(timeout=3.0), "renewed every 0.5 s, yet never found out"
    assert isinstance(running.lost_because, TableGone)
    assert "'id_registry'" in str(running.lost_because)
    if how == "emptied":
        assert "no longer holds pipeline id 'east'" in str(running.lost_because)
    else:
        assert "no longer exists" in str(running.lost_because)


def test_the_outputs_an_id_wrote_to_outlive_its_lease(lease, bigtable_instance):
    # The verifier reads them after the pipelines end, to know where each
    # id's joins are: each output's cell is renewed with the lease and kept
    # when the lease is released.
    first = lease("host-a:/out/east", output_id="aaa", clock_ms=later(0))
    first.acquire()
    first.release()
    second = lease("host-a:/out/east2", output_id="bbb", clock_ms=later(60))
    second.acquire()
    assert second.renew()
    renewed_ms = time.time_ns() // 1_000_000 + 60_000
    second.release()
    lease("host-b:/out/west", token="west", output_id="ccc").acquire()

    written = outputs_written(target_of(bigtable_instance), GC_DAYS, "east")
    assert {made: held.holder for made, held in written.items()} == {
        "aaa": "host-a:/out/east",
        "bbb": "host-a:/out/east2",
    }
    assert written["bbb"].renewed_ms - renewed_ms in range(-5_000, 1)
    assert written["aaa"].renewed_ms < written["bbb"].renewed_ms
    assert outputs_written(target_of(bigtable_instance), GC_DAYS, "north") == {}


def ended_process():
    """The id of a process that has ended."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    return probe.pid


def test_a_second_process_on_the_same_output_is_refused_while_the_first_runs(
    lease,
):
    # Both named the same host and output, so the second took the id as a
    # restart, and the two overwrote each other's renewals without either
    # noticing: a stalled run a supervisor restarted beside it, both
    # registering clicks as the pipeline. The first, ending, then released
    # the cell under the second, which stopped as if the table were emptied.
    running = lease("host-a:/out/east", pid=os.getpid())
    running.acquire()
    twin = lease("host-a:/out/east", pid=ended_process())
    with pytest.raises(PipelineIdInUse, match=r"writing to the same output .*"):
        twin.acquire()
    assert running.renew()


def test_a_restart_takes_the_id_of_its_ended_predecessor_at_once(lease):
    crashed = lease("host-a:/out/east", pid=ended_process())
    crashed.acquire()
    restarted = lease("host-a:/out/east", pid=os.getpid())
    restarted.acquire()
    # The crashed run's renewal, had it lived on, would find the id taken.
    assert not crashed.renew()


def test_a_lease_cell_of_the_older_form_is_read():
    # Written before the process was recorded: "renewed_ms host:output".
    older = Holding.decode(b"1767571200000 host-a:/out/east dir")
    assert older == Holding("host-a:/out/east dir", 1_767_571_200_000, None)
    now = Holding("host-a:/out/east dir", 1_767_571_200_000, 42)
    assert Holding.decode(now.encode()) == now

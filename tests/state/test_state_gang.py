"""reserve_gang, the same for both stores: every member reserved in one transaction or none, a
member's conflict naming it, the operation limit, members sharing a node, and two gangs racing
for the same GPUs."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest
from state_support import inventory, job, snapshot

from iadeep.state import AllocationConflict, GangMember, GpuState


@pytest.fixture
def four_nodes(store):
    for n in ("n1", "n2", "n3", "n4"):
        store.put_inventory(inventory(n, 4, 32.0))
    return store


def _gang(name: str, nodes: list[str], *, mem: float = 8.0, gpus: tuple[int, ...] = (0, 1, 2, 3)) -> list[GangMember]:
    return [GangMember(msgspec.structs.replace(job(f"{name}-{i}", mem, num_gpus=len(gpus)), gang=name), node, gpus)
            for i, node in enumerate(nodes)]


def test_every_member_is_reserved_with_its_job_record(four_nodes):
    s = four_nodes
    members = _gang("g", ["n1", "n2", "n3", "n4"])
    out = s.reserve_gang(members, colocation_limit=2, now_s=5.0)
    assert [[(a.pod_uid, a.node, a.gpu) for a in held] for held in out] == [
        [(f"g-{i}", n, g) for g in range(4)] for i, n in enumerate(["n1", "n2", "n3", "n4"])]
    jobs = s.jobs()
    assert {u: j.gang for u, j in jobs.items()} == {f"g-{i}": "g" for i in range(4)}
    assert len(s.assignments()) == 16
    assert s.gpu_states()[("n3", 2)] == GpuState("n3", 2, 8.0, ("g-2",))
    # each member's reservation is its own: one release frees that member only
    assert len(s.release("g-1", now_s=6.0)) == 4
    assert sorted({a.pod_uid for a in s.assignments()}) == ["g-0", "g-2", "g-3"]


def test_one_member_that_does_not_fit_reserves_nothing(four_nodes):
    s = four_nodes
    s.reserve(job("filler", 30.0), "n4", [3], colocation_limit=2, now_s=1.0)
    before = snapshot(s)
    with pytest.raises(AllocationConflict, match=r"gang 'g' member 3 \(g-3\): n4/gpu3: not enough memory"):
        s.reserve_gang(_gang("g", ["n1", "n2", "n3", "n4"]), colocation_limit=2, now_s=5.0)
    assert snapshot(s) == before
    assert {a.pod_uid for a in s.assignments()} == {"filler"}


def test_a_member_holding_a_reservation_is_a_conflict(four_nodes):
    s = four_nodes
    s.reserve(job("g-2", 8.0), "n1", [0], colocation_limit=2, now_s=1.0)
    with pytest.raises(AllocationConflict, match="already holds a reservation") as exc:
        s.reserve_gang(_gang("g", ["n1", "n2", "n3", "n4"]), colocation_limit=2, now_s=5.0)
    assert [a.pod_uid for a in exc.value.held] == ["g-2"]
    assert {a.pod_uid for a in s.assignments()} == {"g-2"}


def test_members_on_one_node_count_against_each_other(four_nodes):
    """Two members on the same GPUs of one node: the second sees the first's memory and pod."""
    s = four_nodes
    members = _gang("g", ["n1", "n1"], mem=16.0, gpus=(0, 1))
    s.reserve_gang(members, colocation_limit=2, now_s=1.0)
    assert s.gpu_states()[("n1", 0)] == GpuState("n1", 0, 32.0, ("g-0", "g-1"))
    with pytest.raises(AllocationConflict, match="co-location limit 2 reached"):
        s.reserve_gang(_gang("h", ["n2", "n2", "n2"], mem=4.0, gpus=(0,)), colocation_limit=2, now_s=2.0)
    assert not [a for a in s.assignments() if a.node == "n2"]


def test_more_operations_than_one_transaction_is_refused(four_nodes):
    s = four_nodes
    # 11 members of 4 GPUs: 11 x 14 = 154 operations > 128
    members = _gang("big", ["n1", "n2", "n3", "n4"] * 3)[:11]
    with pytest.raises(AllocationConflict, match="154 operations in one etcd transaction"):
        s.reserve_gang(members, colocation_limit=8, now_s=1.0)
    assert s.assignments() == []


def test_two_gangs_racing_for_the_same_gpus_one_wins_whole(four_nodes):
    """Eight gangs of 4 x 4 GPUs at 20 GiB race for a cluster with room for one: exactly one wins,
    and every GPU holds that gang's member and nothing else."""
    s = four_nodes
    barrier = threading.Barrier(8)

    def one(i: int) -> bool:
        barrier.wait()
        try:
            s.reserve_gang(_gang(f"g{i}", ["n1", "n2", "n3", "n4"], mem=20.0), colocation_limit=2, now_s=float(i))
            return True
        except AllocationConflict:
            return False

    with ThreadPoolExecutor(8) as pool:
        wins = [i for i, won in enumerate(pool.map(one, range(8))) if won]
    assert len(wins) == 1
    (w,) = wins
    assert sorted(a.pod_uid for a in s.assignments()) == sorted(f"g{w}-{i}" for i in range(4) for _ in range(4))
    assert all(st.pods == (f"g{w}-{['n1', 'n2', 'n3', 'n4'].index(st.node)}",) for st in s.gpu_states().values())

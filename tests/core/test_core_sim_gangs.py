"""Multi-node jobs as gangs of pods in the simulator: the pod split rule, pod-consistent GPU choice,
and the ``any-gpus`` placement kept for comparison."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iadeep.policy import ClusterView, JobRequest, choose_gpus, make_policy, pod_size, policy_names
from iadeep.sim import ClusterSpec, SimSettings, simulate

R50 = ("ResNet-50", 64)


def _jobs(rows) -> pd.DataFrame:
    """``(job_id, submit_s, duration_s, num_gpus)`` rows, all ResNet-50 at batch 64."""
    return pd.DataFrame([{"job_id": j, "submit_time": t, "duration": d, "num_gpus": k, "model": R50[0],
                          "batch_size": R50[1]} for j, t, d, k in rows])


def _pods(placement: str) -> dict[str, int]:
    """``"node-00/0;node-00/1;..."`` -> GPUs per node."""
    out: dict[str, int] = {}
    for gpu in placement.split(";"):
        node = gpu.split("/")[0]
        out[node] = out.get(node, 0) + 1
    return out


@pytest.mark.parametrize("k, nodes, p", [
    (16, [4] * 5, 4), (6, [4] * 5, 3), (8, [4] * 5, 4), (5, [4] * 5, 1), (3, [4] * 5, 3), (4, [4] * 5, 4),
    (1, [4], 1), (8, [8, 2, 2, 2, 2], 8), (16, [8, 2, 2, 2, 2], 2), (12, [4, 4, 4], 4), (12, [4, 4, 2, 2], 2),
])
def test_pod_size_is_the_largest_equal_split_the_nodes_hold(k, nodes, p):
    assert pod_size(k, nodes) == p
    assert k % p == 0 and sum(n // p for n in nodes) >= k // p


def test_pod_size_of_a_job_wider_than_the_nodes_is_a_clear_error():
    with pytest.raises(ValueError, match="24 GPUs does not fit nodes of 20 GPUs"):
        pod_size(24, [4] * 5)


def test_gang_placement_is_checked_by_name():
    with pytest.raises(ValueError, match="unknown gang_placement 'spread'; known: pods, any-gpus"):
        SimSettings(gang_placement="spread")


def _fragmenting_trace() -> pd.DataFrame:
    """On 5 x 4 GPUs: four 3-GPU jobs take nodes 0-3 (until t=100); four 1-GPU jobs take the
    fourth GPU of each (until t=10,001); a 16-GPU job arrives at t=2. From t=100, 16 GPUs are
    free, but only node 4 has all four free."""
    rows = [(f"three-{i}", 0.0, 100.0, 3) for i in range(4)]
    rows += [(f"one-{i}", 1.0, 10_000.0, 1) for i in range(4)]
    rows += [("gang", 2.0, 500.0, 16)]
    return _jobs(rows)


@pytest.mark.parametrize("name", policy_names())
def test_a_16_gpu_job_on_4_gpu_nodes_runs_as_4_whole_node_pods(model, name):
    out = simulate(_fragmenting_trace(), make_policy(name, model), model, ClusterSpec(5, 4, 24.0),
                   SimSettings(queue="kube", tuning=False)).jobs.set_index("job_id")
    assert sorted(_pods(out.loc["gang", "placement"]).values()) == [4, 4, 4, 4]
    if name == "exclusive":  # no sharing: it waits for the four 1-GPU jobs to leave their nodes
        assert out.loc["gang", "start_s"] >= 10_001.0 - 1e-6


def test_any_gpus_spreads_the_16_gpu_job_as_the_policy_picks_gpus(model):
    out = simulate(_fragmenting_trace(), make_policy("exclusive", model), model, ClusterSpec(5, 4, 24.0),
                   SimSettings(queue="kube", tuning=False, gang_placement="any-gpus")).jobs.set_index("job_id")
    # whole nodes in order of eligible GPUs (node 4's four), then the three left on each of nodes 0-3
    assert _pods(out.loc["gang", "placement"]) == {"node-04": 4, "node-00": 3, "node-01": 3, "node-02": 3, "node-03": 3}
    assert out.loc["gang", "start_s"] == pytest.approx(100.0)


@pytest.mark.parametrize("gang_placement, split", [("pods", [3, 3]), ("any-gpus", [4, 2])])
def test_a_6_gpu_job_on_4_gpu_nodes(model, gang_placement, split):
    """Pods: 2 pods of 3 (equal pods that divide 6 and fit a node); any GPUs: a whole node and 2."""
    out = simulate(_jobs([("six", 0.0, 100.0, 6)]), make_policy("exclusive", model), model, ClusterSpec(2, 4, 24.0),
                   SimSettings(gang_placement=gang_placement)).jobs.set_index("job_id")
    assert sorted(_pods(out.loc["six", "placement"]).values(), reverse=True) == split


def _view(njobs_per_gpu: list[int], gpus_per_node: int) -> ClusterView:
    """A view of len(njobs_per_gpu) GPUs; GPU g holds njobs_per_gpu[g] (0 or 1) one-GPU jobs."""
    G = len(njobs_per_gpu)
    slots = np.full((G, 1), -1, dtype=np.int64)
    busy = [g for g, n in enumerate(njobs_per_gpu) if n]
    slots[busy, 0] = np.arange(len(busy))
    J = max(len(busy), 1)
    return ClusterView(0.0, tuple(f"n{i}" for i in range(G // gpus_per_node)), np.arange(G) // gpus_per_node,
                       np.arange(G) % gpus_per_node, np.full(G, 24.0), np.zeros(G), slots, np.zeros(J, dtype=np.int64),
                       np.zeros(J, dtype=np.int64), np.ones(J, dtype=np.int64), np.zeros(J), np.zeros(J), np.zeros(J))


def test_choose_gpus_with_pods_lists_each_pod_on_one_node_best_first():
    view = _view([0] * 12, 4)
    util = np.array([0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 0.2, 0.9, 0.9, 0.9, 0.9])
    gpus = choose_gpus(6, np.ones(12, dtype=bool), util, view, pod_gpus=3)
    assert gpus == (4, 5, 6, 8, 9, 10)  # node 1's best three (3.0), node 2's best three (2.7)
    pods = view.gpu_node[list(gpus)].reshape(-1, 3)
    assert (pods == pods[:, :1]).all()


def test_choose_gpus_with_pods_says_none_when_the_gpus_do_not_split():
    view = _view([0] * 8, 4)
    mask = np.array([1, 1, 1, 0, 1, 1, 1, 0], dtype=bool)  # 6 eligible, 3 on each node
    assert choose_gpus(4, mask, np.ones(8), view, pod_gpus=4) is None
    assert choose_gpus(6, mask, np.ones(8), view, pod_gpus=3) == (0, 1, 2, 4, 5, 6)
    assert len(set(view.gpu_node[list(choose_gpus(4, mask, np.ones(8), view))])) == 2  # any GPUs: spread
    with pytest.raises(ValueError, match="pod_gpus must be 0 or divide k = 4, got 3"):
        choose_gpus(4, mask, np.ones(8), view, pod_gpus=3)


def test_a_single_pod_is_the_any_gpus_rule_when_one_node_has_room():
    view = _view([0] * 12, 4)
    rng = np.random.default_rng(0)
    for _ in range(50):
        mask = rng.random(12) < 0.7
        util = rng.choice([0.3, 0.6, 1.0], size=12)
        k = int(rng.integers(2, 5))
        if (np.bincount(view.gpu_node[mask], minlength=3) >= k).any() and mask.sum() >= k:
            assert choose_gpus(k, mask, util, view, pod_gpus=k) == choose_gpus(k, mask, util, view)


def test_reserve_waits_when_free_gpus_do_not_make_a_pod(model):
    """Six GPUs free, 3 per node: a 4-GPU pod does not fit; the filter answers per pod."""
    view = _view([0, 0, 0, 1, 0, 0, 0, 1], 4)
    policy = make_policy("exclusive", model)
    t = model.type_id(next(x for x in model.types if x.model == R50[0] and x.batch_size == R50[1]))
    job = JobRequest(9, "j", t, 4, 1.0, 100.0, pod_gpus=4)
    decision = policy.place(job, view)
    assert not hasattr(decision, "gpus") and "pod" in decision.reason
    two = JobRequest(9, "j", t, 6, 1.0, 100.0, pod_gpus=3)
    assert sorted(view.gpu_node[list(policy.place(two, view).gpus)].tolist()) == [0, 0, 0, 1, 1, 1]
    assert policy.filter(two, view).feasible == {"n0": 3, "n1": 3}
    with pytest.raises(ValueError, match="pod_gpus must be 0 or divide num_gpus = 6, got 4"):
        JobRequest(9, "j", t, 6, 1.0, 100.0, pod_gpus=4)

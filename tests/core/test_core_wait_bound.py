"""The preemption rule's shortcut: an upper bound of the expected wait from a few remembered GPUs.

``IADeep._preempt_or_wait`` first asks :meth:`IADeep._wait_within` whether the expected wait
passes its check on the GPUs it remembered as freeing up soonest (kept across calls,
``IADeep._soonest``) and computes every GPU's time until free only when that is not shown. The
answer must never differ from the full computation's: checked at every call on a real Philly slice
(every ``True`` against ``expected_wait_s``), and the whole run's decisions and queueing hints
against a run without the shortcut. Planted bugs in the bound (an idle GPU counted, ``need``
ignored, a GPU's time until free from its first occupant alone) must fail the check.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iadeep.policy import Placement, Preemption, make_policy
from iadeep.policy.iadeep import IADeep
from iadeep.sim import ClusterSpec, SimSettings, Simulator


@pytest.fixture(scope="module")
def busy(philly_path):
    """400 real Philly jobs (1-8 GPUs) at mean offered load 3 on 20 GPUs: a queue behind the head,
    gangs waiting for several GPUs."""
    from iadeep.traces import TraceOptions, load_trace

    opts = TraceOptions(start_job=60_000, n_jobs=400, max_gpus=8, target_load=3.0, cluster_gpus=20, seed=0)
    return load_trace("philly", philly_path, opts)


def _run(model, workload, *, check: bool = True, shortcut: bool = True, queue: str = "fifo", gang_placement: str = "pods"):
    """Run the slice under iadeep; return (every place decision, counts of the bound's answers)."""
    policy = make_policy("iadeep", model)
    seen = {"true": 0, "false": 0, "need>1": 0}
    within = policy._wait_within

    def checked(job, view, n_free, factor, ceiling):
        if not shortcut:
            return False
        ok = within(job, view, n_free, factor, ceiling)
        seen["true" if ok else "false"] += 1
        if ok and max(job.num_gpus - n_free, 1) + job.gpus_ahead > 1:
            seen["need>1"] += 1
        if ok and check:
            exact = policy.expected_wait_s(job, view, n_free)
            assert exact * factor <= ceiling, f"bound passed, exact wait {exact} x {factor} > {ceiling}"
        return ok

    policy._wait_within = checked
    sim = Simulator(workload, policy, model, ClusterSpec(5, 4, 24.0), SimSettings(queue=queue, gang_placement=gang_placement))
    decisions = []
    place = policy.place

    def recorded(job, view):
        d = place(job, view)
        decisions.append((job.job_id, view.now_s, d.gpus, getattr(d, "victims", ())) if isinstance(d, (Placement, Preemption))
                         else (job.job_id, view.now_s, d.reason, d.holds_up_to_behind))
        return d

    policy.place = recorded
    result = sim.run()
    return decisions, seen, result.summary()


@pytest.mark.parametrize("queue", ["fifo", "kube"])
def test_the_bound_never_decides_otherwise(model, busy, queue):
    decisions, seen, summary = _run(model, busy, queue=queue)
    if queue == "fifo":  # the FIFO head's waits: the shortcut is taken (the kube queue has no jobs behind)
        assert seen["true"] > 50 and seen["false"] > 0, seen
    base, _, base_summary = _run(model, busy, shortcut=False, queue=queue)
    assert decisions == base
    assert summary == base_summary


def test_the_slice_reaches_waits_for_several_gpus(model, busy):
    """So that a bound ignoring ``need`` is exercised: with gangs on any GPUs (a gang of pods on
    single nodes is never asked, its wait counts where its pods fit), and the decisions the same
    as without the shortcut there too."""
    decisions, seen, summary = _run(model, busy, gang_placement="any-gpus")
    assert seen["need>1"] > 0, seen
    base, _, base_summary = _run(model, busy, shortcut=False, gang_placement="any-gpus")
    assert decisions == base and summary == base_summary


def _two_node_view(ends_h):
    """2 nodes x 4 GPUs; GPUs 0 and 4 free, each other GPU ``g`` alone holds a 1-GPU job that
    ends in ``ends_h[g]`` hours (handles 0-5 in GPU order; handle 6 is the waiting job)."""
    import numpy as np
    from iadeep.policy import ClusterView

    busy = [g for g in range(8) if g not in (0, 4)]
    slots = np.full((8, 2), -1)
    for h, g in enumerate(busy):
        slots[g, 0] = h
    n = len(busy) + 1
    work = np.array([ends_h[g] * 3600.0 for g in busy] + [3600.0])
    return ClusterView(0.0, ("n0", "n1"), np.repeat([0, 1], 4), np.tile(np.arange(4), 2), np.full(8, 24.0),
                       np.where(slots[:, 0] >= 0, 2.0, 0.0), slots, np.zeros(n, dtype=int), np.zeros(n, dtype=int),
                       np.ones(n, dtype=int), work, np.zeros(n), np.r_[np.ones(n - 1), 0.0])


@pytest.mark.parametrize(("pod_gpus", "ahead", "wait_h"), [(4, 0, 3.0), (2, 0, 2.0), (0, 0, 2.0), (4, 1, 4.0)])
def test_a_gang_of_pods_waits_for_room_on_nodes(model, pod_gpus, ahead, wait_h):
    """The expected wait of a 4-GPU job counts where its pods fit. Node 0's busy GPUs end in 1, 3
    and 3 h, node 1's in 2, 2 and 4 h, one GPU free on each. As one pod of 4 GPUs it needs a whole
    node: node 0 at 3 h (the GPU count alone would say the second busy GPU to free, 2 h); as two
    pods of 2 it fits at 2 h (node 0's free GPU with the 1-h one, node 1's free GPU with a 2-h one);
    without a pod rule, 2 h. With one GPU's worth of pods ahead (they take the 1-h GPU), node 0
    holds 3 GPUs at most and the pod of 4 fits on node 1 at 4 h."""
    import numpy as np
    from iadeep.policy import JobRequest
    from iadeep.policy.iadeep import IADeep

    view = _two_node_view([0, 1, 3, 3, 0, 2, 2, 4])
    job = JobRequest(6, "gang", 0, 4, 2.0, 3600.0, ahead, 0, pod_gpus=pod_gpus)
    free = view.njobs == 0
    wait = IADeep(model).expected_wait_s(job, view, int(np.count_nonzero(free)), free)
    assert wait == pytest.approx(wait_h * 3600.0)


@settings(max_examples=300, deadline=None)
@given(nodes=st.integers(1, 5), per_node=st.integers(1, 8), data=st.data())
def test_a_gangs_pods_fit_at_the_first_time_enough_nodes_hold_them(nodes, per_node, data):
    """``IADeep._pods_ready_s`` against its definition, computed another way: the earliest time
    ``t`` (among the GPUs' times until available) by which ``sum over nodes of floor(GPUs available
    on the node by t / p)`` reaches the job's pod count (every pod when the cluster holds fewer,
    0 when it holds none), after the ``gpus_ahead`` busy GPUs that free first are taken. Drawn:
    which GPUs are free, busy (with times, ties included) or neither, ``p``, the pod count and the
    GPUs ahead."""
    import types

    import numpy as np

    g = nodes * per_node
    state = np.array(data.draw(st.lists(st.sampled_from("fbx"), min_size=g, max_size=g)))
    free, busy = state == "f", state == "b"
    left = np.array(data.draw(st.lists(st.integers(0, 6), min_size=int(busy.sum()), max_size=int(busy.sum()))), float)
    p = data.draw(st.integers(1, per_node))
    n_pods = data.draw(st.integers(1, 4))
    ahead = data.draw(st.integers(0, 3))
    node_of = np.repeat(np.arange(nodes), per_node)
    job = types.SimpleNamespace(pod_gpus=p, num_gpus=p * n_pods, gpus_ahead=ahead)
    view = types.SimpleNamespace(gpu_node=node_of, node_names=[f"n{k}" for k in range(nodes)])
    got = IADeep._pods_ready_s(job, view, free, busy, left.copy())

    busy_ids = busy.nonzero()[0][np.argsort(left, kind="stable")[ahead:]]
    times = np.concatenate([np.zeros(int(free.sum())), np.sort(left)[ahead:]])
    nodes_of = np.concatenate([node_of[free], node_of[busy_ids]])

    def pods_by(t):
        return int((np.bincount(nodes_of[times <= t], minlength=nodes) // p).sum())

    most = pods_by(np.inf)
    want = 0.0 if most == 0 else min(t for t in times if pods_by(t) >= min(n_pods, most))
    assert got == want

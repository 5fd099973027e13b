"""The behaviour every placement policy must have, as checks anyone writing a policy can run.

:func:`check_policy` runs a policy through the real simulator (:class:`iadeep.sim.Simulator`) and
checks every decision it is asked for, as the simulator and the extender rely on them:

- ``place(job, view)`` leaves the view as it was (every array equal after the call) and answers a
  :class:`~iadeep.policy.Placement` of distinct GPUs of the view, or a
  :class:`~iadeep.policy.Wait` with a reason, or a :class:`~iadeep.policy.Preemption` naming its
  victims and why (the simulator checks memory, shares, models and the co-location limit of every
  placement itself and raises ``RuntimeError``);
- ``filter(job, view, nodes)`` (the extender's filter) sorts every node asked about, and an
  unknown one, into feasible or failed, each failure with a reason; ``score`` answers an integer
  0..10 for exactly the feasible nodes; ``assess`` is filter and score in one pass;
- two runs from fresh policies give the same jobs table (a policy is deterministic given its seed).

Usage, in a test of a new policy::

    from iadeep.testing.policy import check_policy

    def test_my_policy_keeps_the_contract(model, workload):
        check_policy(lambda: MyPolicy(model), model, workload)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from iadeep.interference import InterferenceModel
from iadeep.policy import ClusterView, JobRequest, Placement, Policy, Preemption, Wait
from iadeep.sim import ClusterSpec, SimSettings, Simulator

__all__ = ["PolicyContractError", "check_policy"]

UNKNOWN_NODE = "no-such-node"


class PolicyContractError(AssertionError):
    """A policy broke the contract; the message names the policy, the check and the job."""


def _arrays(view: ClusterView) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in vars(view).items() if isinstance(v, np.ndarray)}


class _Checked:
    """A policy whose every decision is checked (all else is the policy's own)."""

    def __init__(self, policy: Policy, assess_every: int) -> None:
        object.__setattr__(self, "_inner", policy)
        object.__setattr__(self, "_every", max(int(assess_every), 1))
        object.__setattr__(self, "counts", {"place": 0, "wait": 0, "assess": 0})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def _fail(self, check: str, job: JobRequest, detail: str) -> PolicyContractError:
        return PolicyContractError(f"policy {self._inner.name}: {check} (job {job.job_id}, {job.num_gpus} GPU(s)): "
                                   f"{detail}")

    def place(self, job: JobRequest, view: ClusterView) -> Placement | Wait:
        before = _arrays(view)
        decision = self._inner.place(job, view)
        changed = [k for k, v in before.items() if not np.array_equal(v, getattr(view, k), equal_nan=v.dtype.kind == "f")]
        if changed:
            raise self._fail("place changed the view", job, f"arrays {changed}")
        if isinstance(decision, (Placement, Preemption)):
            gpus = list(decision.gpus)
            if len(set(gpus)) != len(gpus) or len(gpus) != job.num_gpus or not all(0 <= g < view.n_gpus for g in gpus):
                raise self._fail("a placement must name the job's number of distinct GPUs of the view", job, f"GPUs {gpus}")
            if isinstance(decision, Preemption) and not (decision.victims and decision.reason):
                raise self._fail("a preemption must name its victims and say why", job, repr(decision))
            self.counts["place"] += 1
        elif isinstance(decision, Wait):
            if not decision.reason:
                raise self._fail("a wait must say why", job, repr(decision))
            self.counts["wait"] += 1
        else:
            raise self._fail("place must answer a Placement, a Wait or a Preemption", job, repr(decision))
        if (self.counts["place"] + self.counts["wait"]) % self._every == 0:
            self._check_assess(job, view)
        return decision

    def _check_assess(self, job: JobRequest, view: ClusterView) -> None:
        nodes: Sequence[str] = [*view.node_names, UNKNOWN_NODE]
        res = self._inner.filter(job, view, list(nodes))
        if set(res.feasible) | set(res.failed) != set(nodes) or set(res.feasible) & set(res.failed):
            raise self._fail("filter must sort every node into feasible or failed, once", job,
                             f"feasible {sorted(res.feasible)}, failed {sorted(res.failed)}")
        if UNKNOWN_NODE not in res.failed:
            raise self._fail("filter must fail a node the view does not have", job, f"{UNKNOWN_NODE} passed")
        if not all(res.failed.values()):
            raise self._fail("every failed node needs a reason", job, repr(res.failed))
        scores = self._inner.score(job, view, res.feasible)
        if set(scores) != set(res.feasible) or not all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values()):
            raise self._fail("score must answer an int 0..10 for exactly the feasible nodes", job, repr(scores))
        whole = self._inner.filter(job, view)
        if self._inner.assess(job, view) != (whole, self._inner.score(job, view, whole.feasible)):
            raise self._fail("assess must equal filter then score", job, "they differ")
        self.counts["assess"] += 1


def check_policy(make: Callable[[], Policy], model: InterferenceModel, workload: pd.DataFrame, *,
                 cluster: ClusterSpec | None = None, settings: SimSettings | None = None,
                 assess_every: int = 7) -> dict[str, int]:
    """Run ``make()``'s policy through the simulator twice, checking its decisions (module docstring).

    Args:
        make: builds a fresh policy (called once per run).
        model: the interference model the simulator runs the jobs with.
        workload: the job table (``iadeep.traces`` columns: job_id, submit_time, duration,
            num_gpus, model, batch_size); a few dozen jobs on a small cluster exercise sharing.
        cluster: the cluster (default 2 nodes x 4 GPUs x 24 GiB: jobs contend for GPUs).
        settings: the simulator's settings (default: ``SimSettings()``).
        assess_every: the filter, score and assess check runs on every ``assess_every``-th decision.

    Returns:
        How many decisions were checked: ``{"place", "wait", "assess"}`` (first run).

    Raises:
        PolicyContractError: a decision broke the contract, or the two runs differ.
        RuntimeError: the simulator refused a placement (over capacity, wrong model, full GPU).
    """
    cluster = cluster or ClusterSpec(2, 4, 24.0)
    settings = settings or SimSettings()
    tables, counts = [], {}
    for _ in range(2):
        checked = _Checked(make(), assess_every)
        result = Simulator(workload, checked, model, cluster, settings).run()  # type: ignore[arg-type]
        tables.append(result.jobs.reset_index(drop=True))
        counts = counts or dict(checked.counts)
    a, b = tables
    if not a.equals(b):
        diff = a.compare(b) if a.shape == b.shape else f"shapes {a.shape} and {b.shape}"
        raise PolicyContractError(f"policy {make().name}: two runs of the same workload differ:\n{diff}")
    return counts

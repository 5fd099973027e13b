"""Gandiva's packing undo on the live system, end to end: the trace of the iadeep undo test
(tests/live/test_live_undo.py) on the local control plane (one kwok node with one emulated 32-GiB
GPU, the real kube-scheduler, our extender with the ``gandiva`` policy, the GPU emulator, the node
coordinator, kube-controller-manager running the Jobs).

A 1-h CycleGAN job holds the GPU from 0 s; at 200 s a 30-min ResNet-50 at batch 64 arrives. Gandiva
packs it beside the CycleGAN job (the least-loaded GPU); the extender publishes a profile session
(``undo_below`` 1), so the coordinator measures the pair once at the submitted sizes: Gavel's
normalised throughputs sum to 0.25 + 0.57 = 0.82 (3 % noise in the emulator: far enough from 1
that noise never decides) and it records an undo. The extender bans the pair and evicts the
newcomer's pod (Eviction API); its Job replaces the pod without a failure, and the replacement,
banned beside the CycleGAN job, waits for it to end and runs the work left plus the 30-s
checkpoint cost. The simulator under the ``kube`` queue, with gandiva's profile trial, does the
same (``test_the_simulator_predicts_it``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from live_support import assert_newcomer_undone

from iadeep.experiment._live import TUNED_POLICIES, LiveSettings, run_live_policy
from iadeep.experiment._livecluster import LocalCluster
from iadeep.interference import InterferenceModel
from iadeep.policy import make_policy
from iadeep.sim import SimSettings, simulate
from iadeep.state import EtcdStateStore, StateSettings

from test_live_undo import CLUSTER, NEW_AT, NEW_S, SPEEDUP, _jobs  # noqa: I001 - the same trace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replay(controlplane_binaries, throughputs_path, tmp_path_factory):
    model = InterferenceModel.from_file(throughputs_path, "v100")
    jobs = _jobs(model)
    with LocalCluster(CLUSTER, Path(throughputs_path), workdir=tmp_path_factory.mktemp("gandiva")) as lc:
        # the coordinator runs where the live backend runs it (run_live, compare)
        prefix = lc.prepare("rgandiva", "gandiva", seed=0, speedup=SPEEDUP, tuning="gandiva" in TUNED_POLICIES)
        store = EtcdStateStore(StateSettings(endpoints=[lc.etcd.endpoint], prefix=prefix))
        try:
            result, metrics = run_live_policy(lc.api, jobs, model, CLUSTER, policy="gandiva", run="rgandiva",
                                              settings=LiveSettings(speedup=SPEEDUP), store=store)
            undos, placement, rounds = store.undos(), store.placement(), lc.tuning_rounds()
        finally:
            store.close()
    return result.jobs.set_index("job_id"), metrics, undos, placement, rounds


def test_the_extender_publishes_gandivas_profile_session(replay):
    _, _, _, placement, rounds = replay
    assert (placement.policy, placement.session, placement.undo_below) == ("gandiva", "profile", 1.0)
    assert rounds["sessions"].get("undone") == 1  # the coordinator's profile ended in the undo


def test_the_profile_undoes_the_pair_and_the_extender_evicts_the_newcomer(replay):
    out, metrics, undos, _, _ = replay
    assert_newcomer_undone(out, metrics, undos)
    (record,) = undos.values()
    assert 0.6 < record.progress < 0.95  # Gavel's 0.82 at the submitted sizes, within the noise


def test_the_replacement_waits_for_the_banned_partner_and_resumes_its_work(replay):
    out, *_ = replay
    assert out.loc["newcomer", "end_s"] > out.loc["survivor", "end_s"] + 0.5 * NEW_S
    assert NEW_AT <= out.loc["newcomer", "start_s"] < out.loc["survivor", "end_s"]  # its first start, packed


def test_the_simulator_predicts_it(replay, throughputs_path):
    """The simulator under kube-scheduler's queue with gandiva's profile (one trial): the same undo
    (the newcomer evicted once, the survivor never), the replacement after the survivor."""
    out, *_ = replay
    model = InterferenceModel.from_file(throughputs_path, "v100").whole_gib()
    sim = simulate(_jobs(model), make_policy("gandiva", model), model, CLUSTER, SimSettings(queue="kube")).jobs.set_index("job_id")
    assert sim["evictions"].to_dict() == out["evictions"].to_dict() == {"survivor": 0, "newcomer": 1}
    assert sim.loc["newcomer", "tuning_trials"] == 1  # one profile trial, as the live profile's one round
    for r in (sim, out):
        assert r.loc["newcomer", "end_s"] > r.loc["survivor", "end_s"] + 0.5 * NEW_S

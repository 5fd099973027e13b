"""Independent checks of the simulator: small scenarios whose expected times are computed here.

Every expected time below comes from Gavel's measured throughputs read straight from the JSON
file (not through :mod:`iadeep.interference`) and from the progress rule stated in the simulator's
docstring: a job on a shared GPU progresses at its normalised throughput (co-located steps/s over
isolated steps/s, capped at 1), a gang at its slowest GPU, alone at rate 1. None of them is read
back from a simulation; each would change if the simulator ignored interference, ran a gang at its
fastest GPU, made a tuning session free, or re-queued the wrong job.
"""

from __future__ import annotations

import heapq
import json

import numpy as np
import pandas as pd
import pytest

from iadeep.goodput import GRADIENT_NOISE_SCALE
from iadeep.jobtypes import JobType
from iadeep.policy import TuningDecision, make_policy
from iadeep.policy.antman import AntMan
from iadeep.policy.gandiva import Gandiva
from iadeep.sim import ClusterSpec, SimSettings, Simulator, simulate

LM5 = ("LM", 5)
R50_64 = ("ResNet-50", 64)
R50_32 = ("ResNet-50", 32)
R50_16 = ("ResNet-50", 16)
R18_16 = ("ResNet-18", 16)
A3C = ("A3C", None)


def _key(t: tuple[str, int | None]) -> str:
    name = t[0] if t[1] is None else f"{t[0]} (batch size {t[1]})"
    return f"('{name}', 1)"


@pytest.fixture(scope="module")
def v100(throughputs_path) -> dict:
    """The V100 section of Gavel's ``simulation_throughputs.json``, read directly."""
    return json.loads(throughputs_path.read_text())["v100"]


def norm(v100: dict, job, partner) -> float:
    """Measured normalised throughput of ``job`` sharing one GPU with ``partner`` (capped at 1)."""
    own = v100[_key(job)][_key(partner)][0]
    return min(own / v100[_key(job)]["null"], 1.0)


def _jobs(rows: list[tuple[str, float, float, int, tuple[str, int | None]]], model) -> pd.DataFrame:
    """Job table from ``(job_id, submit_s, duration_s, num_gpus, (model, batch))`` rows."""
    out = []
    for job_id, submit, duration, gpus, (fam, batch) in rows:
        if batch is None:  # a type measured at one batch size only (A3C, CycleGAN)
            batch = next(t.batch_size for t in model.types if t.model == fam)
        out.append({"job_id": job_id, "submit_time": submit, "duration": duration, "num_gpus": gpus,
                    "model": fam, "batch_size": batch})
    return pd.DataFrame(out)


def _run(rows, model, policy, cluster=ClusterSpec(1, 1, 24.0), **settings):
    jobs = _jobs(rows, model)
    return simulate(jobs, policy, model, cluster, SimSettings(**settings)).jobs.set_index("job_id")


def test_two_colocated_jobs_end_at_closed_form_times(model, v100):
    """Both progress at their measured normalised throughputs until the first ends; then alone."""
    a, b = norm(v100, LM5, R50_64), norm(v100, R50_64, LM5)
    d_a, d_b = 1000.0, 2000.0
    assert a < 0.5 and b < 0.8  # a pair with real interference
    out = _run([("a", 0, d_a, 1, LM5), ("b", 0, d_b, 1, R50_64)], model, AntMan(model))
    t_a, t_b = d_a / a, d_b / b
    first = min(t_a, t_b)
    if t_b < t_a:
        expected = {"b": t_b, "a": t_b + (d_a - a * t_b)}
    else:
        expected = {"a": t_a, "b": t_a + (d_b - b * t_a)}
    assert first == pytest.approx(min(expected.values()))
    for job, end in expected.items():
        assert out.loc[job, "end_s"] == pytest.approx(end, rel=1e-9)
        assert out.loc[job, "colocations"] == 1


def test_gang_runs_at_its_slowest_gpu(model, v100):
    """A 2-GPU job sharing one of its GPUs runs at the shared GPU's rate, not the free one's."""
    g_rate, x_rate = norm(v100, R50_64, LM5), norm(v100, LM5, R50_64)
    d_x, d_g = 5000.0, 1000.0
    out = _run([("x", 0, d_x, 1, LM5), ("gang", 0, d_g, 2, R50_64)], model, AntMan(model), ClusterSpec(1, 2, 24.0))
    t_g = d_g / g_rate
    assert t_g < d_x / x_rate  # the gang ends first
    assert out.loc["gang", "end_s"] == pytest.approx(t_g, rel=1e-9)
    assert out.loc["x", "end_s"] == pytest.approx(t_g + (d_x - x_rate * t_g), rel=1e-9)


class _TuneOnce(AntMan):
    """First fit; a GPU with two jobs is measured ``n`` times as it runs, then job ``b`` switches
    to ResNet-50 at batch 32 (a driver-visible, fixed decision: what the session costs is the point)."""

    name = "tune-once-test"

    def __init__(self, model, n: int):
        super().__init__(model)
        self.n, self.switch_to = n, model.type_id(JobType(*R50_32))

    def tune(self, gpu, view, measure):
        handles = [int(h) for h in view.occupants(gpu)]
        if len(handles) < 2:
            return super().tune(gpu, view, measure)
        config = {h: int(view.job_type[h]) for h in handles}
        for _ in range(self.n):
            measure(config)
        return TuningDecision(gpu, {handles[1]: self.switch_to}, trials=self.n)


def test_tuning_session_costs_its_trial_time(model, v100):
    """During ``n x trial_s`` the jobs run as measured (submitted sizes); the new size applies after."""
    n, trial_s = 3, 20.0
    d_a, d_b = 2000.0, 1500.0
    a0, b0 = norm(v100, LM5, R50_64), norm(v100, R50_64, LM5)
    a1 = norm(v100, LM5, R50_32)
    # goodput of batch 32 relative to the submitted 64: steps/s x batch x statistical efficiency
    # (Pollux's E(b) = (phi + b0) / (phi + b); phi of ResNet-50 from iadeep.goodput's cited table)
    phi = GRADIENT_NOISE_SCALE["ResNet-50"]
    gain = (v100[_key(R50_32)]["null"] * 32 * (phi + 64) / (phi + 32)) / (v100[_key(R50_64)]["null"] * 64)
    b1 = min(v100[_key(R50_32)][_key(LM5)][0] / v100[_key(R50_32)]["null"] * gain, 1.0)
    out = _run([("a", 0, d_a, 1, LM5), ("b", 0, d_b, 1, R50_64)], model, _TuneOnce(model, n), trial_s=trial_s)
    s = n * trial_s
    left_a, left_b = d_a - a0 * s, d_b - b0 * s
    t_a, t_b = s + left_a / a1, s + left_b / b1
    if t_b < t_a:  # b ends first; a then runs alone
        expected = {"b": t_b, "a": t_b + (left_a - a1 * (t_b - s))}
    else:  # a ends first; b alone goes back to its submitted batch size (rate 1)
        expected = {"a": t_a, "b": t_a + (left_b - b1 * (t_a - s))}
    for job, end in expected.items():
        assert out.loc[job, "end_s"] == pytest.approx(end, rel=1e-9), job
    assert (out["tuning_trials"] == n).all()


def test_undo_requeues_the_newest_job_with_its_progress_kept(model, v100):
    """Gandiva profiles a packing for one trial, then evicts the newest job; the evicted job keeps
    the work it did and pays the restart penalty; the pair is not formed again."""
    trial_s, penalty = 20.0, 30.0
    x_rate, y_rate = norm(v100, A3C, R50_16), norm(v100, R50_16, A3C)
    assert x_rate + y_rate < 1  # measured worse than taking turns: Gandiva undoes it
    d_x, d_y, t_y = 1000.0, 500.0, 100.0
    out = _run([("x", 0, d_x, 1, A3C), ("y", t_y, d_y, 1, R50_16)], model, Gandiva(model),
               trial_s=trial_s, restart_penalty_s=penalty, measurement_noise=0.0)
    x_left = d_x - t_y - x_rate * trial_s
    x_end = t_y + trial_s + x_left
    y_left = d_y - y_rate * trial_s + penalty
    assert out.loc["y", "evictions"] == 1 and out.loc["x", "evictions"] == 0
    assert out.loc["x", "end_s"] == pytest.approx(x_end, rel=1e-9)
    assert out.loc["y", "start_s"] == pytest.approx(t_y)  # its first start counts for queueing delay
    assert out.loc["y", "end_s"] == pytest.approx(x_end + y_left, rel=1e-9)


@pytest.mark.parametrize("name", ["gandiva", "iadeep"])
def test_undo_evicts_the_newest_job_when_the_survivor_sits_in_a_later_slot(model, name):
    """The older job's partner ends first; a new partner measured bad arrives: the new one goes.

    Before the slot fix the survivor stayed in slot 1 and the newcomer took slot 0, so the undo
    evicted the survivor (the older job), and iadeep priced the newcomer against handle -1."""
    rows = [("first", 0, 100, 1, R18_16), ("survivor", 0, 50_000, 1, A3C), ("newcomer", 200, 5_000, 1, R50_16)]
    policy = make_policy(name, model, predictor="oracle", bad_pairs_when_waiting=True) if name == "iadeep" else Gandiva(model)
    seen: list[tuple[str, np.ndarray]] = []
    place = policy.place

    def recording_place(job, view):
        seen.append((job.job_id, view.slots.copy()))
        return place(job, view)

    policy.place = recording_place
    out = _run(rows, model, policy, measurement_noise=0.0)
    assert out.loc["survivor", "evictions"] == 0
    slots = next(sl for job_id, sl in seen if job_id == "newcomer")
    assert slots[0].tolist() == [1, -1]  # the survivor (handle 1) is the GPU's slot 0 when the newcomer asks
    if out["evictions"].sum():
        assert out.loc["newcomer", "evictions"] >= 1


def test_job_arriving_exactly_when_another_ends_starts_then(model):
    """Completion and arrival at the same instant are one event batch: no queueing delay."""
    out = _run([("a", 0, 100, 1, R18_16), ("b", 100, 50, 1, R18_16)], model, make_policy("exclusive", model))
    assert out.loc["b", "start_s"] == 100 and out.loc["b", "end_s"] == 150 and out.loc["b", "queueing_s"] == 0


def _strict_fifo(jobs: pd.DataFrame, n_gpus: int) -> pd.DataFrame:
    """Reference: one job per GPU, strict FIFO by submission (stable), any free GPUs serve a gang."""
    order = np.argsort(jobs["submit_time"].to_numpy(), kind="stable")
    running: list[tuple[float, int]] = []
    free, last_start = n_gpus, 0.0
    start = np.zeros(len(jobs))
    for i in order:
        k, t = int(jobs["num_gpus"].iat[i]), max(float(jobs["submit_time"].iat[i]), last_start)
        while running and running[0][0] <= t:
            free += heapq.heappop(running)[1]
        while free < k:
            end, g = heapq.heappop(running)
            t, free = max(t, end), free + g
            while running and running[0][0] <= t:
                free += heapq.heappop(running)[1]
        free -= k
        start[i] = last_start = t
        heapq.heappush(running, (t + float(jobs["duration"].iat[i]), k))
    return pd.DataFrame({"job_id": jobs["job_id"].astype(str), "start_s": start,
                         "end_s": start + jobs["duration"].to_numpy(dtype=float)}).set_index("job_id")


def test_exclusive_equals_a_strict_fifo_reference_on_a_real_slice(model, workload):
    """The reference lets any free GPUs serve a gang: the simulator's ``any-gpus`` placement."""
    cluster = ClusterSpec(5, 4, 24.0)
    sim = Simulator(workload, make_policy("exclusive", model), model, cluster,
                    SimSettings(gang_placement="any-gpus")).run().jobs.set_index("job_id")
    ref = _strict_fifo(workload, cluster.total_gpus)
    assert (workload["num_gpus"] > 1).any()
    np.testing.assert_allclose(sim.loc[ref.index, "start_s"], ref["start_s"], atol=1.0)
    np.testing.assert_allclose(sim.loc[ref.index, "end_s"], ref["end_s"], atol=1.0)


def test_progress_never_exceeds_the_dedicated_run():
    """A larger batch can raise goodput, but a job never progresses faster than its dedicated run as
    submitted (the trace's duration is the fastest it runs). Found by mutmut: a cap of 2 survived."""
    from iadeep.goodput import progress

    assert progress(1.0, 1.7) == 1.0 and progress(0.9, 1.5) == 1.0
    assert progress(0.5, 1.5) == pytest.approx(0.75)

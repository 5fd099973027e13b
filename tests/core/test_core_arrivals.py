"""The arrival price (:meth:`iadeep.policy.iadeep.IADeep.arrival_cost_s`): a job of several GPUs
that would leave no room for the one-GPU jobs arriving pays for their wait, ``lambda_b T**2 / 2``.

The scenarios use Gavel's measurements: ResNet-50 at batch 128 is measured out of memory beside
LM at batch 10, so an LM gang on every GPU leaves no room for it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iadeep.jobtypes import JobType
from iadeep.policy import JobRequest, make_policy
from iadeep.policy.iadeep import ARRIVAL_HOLD_AT_MOST, ARRIVAL_WINDOW_S
from iadeep.sim import ClusterSpec, SimSettings, simulate

HOUR = 3600.0
MIN = 60.0


def _jobs(rows) -> pd.DataFrame:
    return pd.DataFrame([{"job_id": j, "submit_time": t, "duration": d, "num_gpus": k, "model": m, "batch_size": b}
                         for j, t, d, k, m, b in rows])


def _stream(first_s: float, last_s: float, every_s: float, run_s: float) -> list[tuple]:
    """One-GPU ResNet-50/128 jobs of ``run_s`` every ``every_s`` from ``first_s`` to ``last_s``."""
    return [(f"r{i}", t, run_s, 1, "ResNet-50", 128) for i, t in enumerate(np.arange(first_s, last_s + 1, every_s))]


def _run(model, rows, *, policy="iadeep", **options) -> pd.DataFrame:
    pol = make_policy(policy, model, **({"predictor": "oracle", "price_arrivals": True, **options} if policy == "iadeep" else {}))
    return simulate(_jobs(rows), pol, model, ClusterSpec(2, 4, 24.0),
                    SimSettings(queue="kube", measurement_noise=0.0)).jobs.set_index("job_id")


def test_the_scenario_holds_what_the_tests_assume(model):
    """ResNet-50/128 does not fit beside LM/10 (both orders): the gang leaves it no room."""
    r50 = model.type_id(JobType("ResNet-50", 128))
    lm = model.type_id(JobType("LM", 10))
    assert not model.fits[r50, lm] and not model.fits[lm, r50]


def test_a_gang_waits_for_a_burst_of_one_gpu_jobs_to_pass(model):
    """Eight GPUs; a burst of 10-min one-GPU jobs every 30 min from 0 to 20 h (a GPU or none busy
    at a time); at 10 h an 8-GPU LM gang of 12 h. Without the price the gang takes every GPU at
    once and the 20 jobs arriving in the rest of the burst wait until it ends (about 7 h each,
    some 140 job-hours). With it (2 jobs/h blocked, ``T`` = 12 h: 144 job-hours against a wait of
    minutes for the GPUs) the gang waits; at 20 h the burst ends, but the rate of the last day still
    prices it until it has waited twice its 12 h: the burst's jobs never wait, the gang loses 24 h
    (the jobs it is held for lose some 140 job-hours without it), and the average falls. The
    packing baselines place the gang as the policy without the price does."""
    rows = _stream(0.0, 20 * HOUR, 30 * MIN, 10 * MIN) + [("gang", 10 * HOUR + 15 * MIN, 12 * HOUR, 8, "LM", 10)]
    on = _run(model, rows)
    off = _run(model, rows, price_arrivals=False)
    burst = [j for j in on.index if j.startswith("r")]
    assert off.loc["gang", "queueing_s"] < 1 * HOUR
    assert off.loc[burst, "queueing_s"].sum() > 100 * HOUR
    assert on.loc[burst, "queueing_s"].max() < 1.0
    assert on.loc["gang", "queueing_s"] == pytest.approx(ARRIVAL_HOLD_AT_MOST * 12 * HOUR, abs=30 * MIN)  # then it lapses
    assert on["jct_s"].mean() < 0.85 * off["jct_s"].mean()
    for baseline in ("antman", "gandiva"):
        assert on["jct_s"].mean() < 0.85 * _run(model, rows, policy=baseline)["jct_s"].mean()


def test_a_steady_stream_delays_a_gang_by_at_most_its_own_length(model):
    """The same jobs every 30 min for 80 h: the stream never pauses, so the price holds the gang
    until it has waited twice its 12 h, then it starts (in the first gap after) and blocks the
    stream as it would have at once: holding it is bounded, never a starvation."""
    rows = _stream(0.0, 80 * HOUR, 30 * MIN, 10 * MIN) + [("gang", 10 * HOUR + 15 * MIN, 12 * HOUR, 8, "LM", 10)]
    on = _run(model, rows)
    assert on.loc["gang", "queueing_s"] == pytest.approx(ARRIVAL_HOLD_AT_MOST * 12 * HOUR, abs=30 * MIN)


def test_no_price_when_an_arrival_finds_room(model):
    """Twelve GPUs on three nodes: the gang takes two nodes and leaves the third free, so the burst
    always finds a GPU: the gang starts at once, as without the price."""
    rows = _stream(0.0, 20 * HOUR, 30 * MIN, 10 * MIN) + [("gang", 10 * HOUR + 15 * MIN, 12 * HOUR, 8, "LM", 10)]
    pol = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    out = simulate(_jobs(rows), pol, model, ClusterSpec(3, 4, 24.0),
                   SimSettings(queue="kube", measurement_noise=0.0)).jobs.set_index("job_id")
    assert out.loc["gang", "queueing_s"] < 30 * MIN
    assert out["queueing_s"].max() < 30 * MIN


def _request(model, job_id: str, model_name: str, batch: int, gpus: int, remaining_s: float) -> JobRequest:
    t = model.type_id(JobType(model_name, batch))
    return JobRequest(0, job_id, t, gpus, float(model.mem_gib[t]), remaining_s, pod_gpus=4 if gpus > 1 else 0)


def test_the_price_is_the_blocked_rate_times_half_the_square_of_the_hold(model):
    """The formula on an empty 8-GPU cluster: 11 one-GPU ResNet-50/128 arrivals every half hour
    from 0, then at 5 h an 8-GPU LM gang of 12 h asking: 10 arrivals after the first in 5 h, 2 per
    hour, ``2/3600 x (12 h)**2 / 2`` = 144 job-hours when it takes all eight GPUs; 0 when it
    takes four (room on the others), 0 for arrivals that fit beside it, and 0 once it has waited
    twice its 12 h."""
    from iadeep.sim import Simulator

    pol = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    sim = Simulator(_jobs([("x", 0, 1.0, 1, "ResNet-18", 64)]), pol, model, ClusterSpec(2, 4, 24.0), SimSettings())
    view = sim.view()
    for i in range(11):
        pol._note_arrival(_request(model, f"r{i}", "ResNet-50", 128, 1, 600.0), i * 0.5 * HOUR)
    gang = _request(model, "gang", "LM", 10, 8, 12 * HOUR)
    at = view.at(5 * HOUR)
    pol._note_arrival(gang, 5 * HOUR)
    assert pol.arrival_cost_s(gang, at, tuple(range(8))) == pytest.approx(2 / HOUR * (12 * HOUR) ** 2 / 2)
    assert pol.arrival_cost_s(gang, at, tuple(range(4))) == 0.0
    assert pol.arrival_cost_s(gang, view.at(5 * HOUR + 23 * HOUR), tuple(range(8))) > 0.0
    assert pol.arrival_cost_s(gang, view.at(5 * HOUR + 24 * HOUR), tuple(range(8))) == 0.0  # waited 2 T: lapsed
    fits = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    for i in range(11):  # ResNet-18/64 fits beside LM/10: room beside the gang's pods
        fits._note_arrival(_request(model, f"s{i}", "ResNet-18", 64, 1, 600.0), i * 0.5 * HOUR)
    fits._note_arrival(gang, 5 * HOUR)
    r18, lm = model.type_id(JobType("ResNet-18", 64)), gang.type_id
    assert model.fits[r18, lm]
    assert fits.arrival_cost_s(gang, at, tuple(range(8))) == 0.0


def test_a_single_arrival_is_no_stream(model):
    """One one-GPU job an hour ago is no rate: a gang taking every GPU pays nothing for it."""
    pol = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    from iadeep.sim import Simulator

    sim = Simulator(_jobs([("x", 0, 1.0, 1, "ResNet-18", 64)]), pol, model, ClusterSpec(2, 4, 24.0), SimSettings())
    pol._note_arrival(_request(model, "r", "ResNet-50", 128, 1, 600.0), 0.0)
    gang = _request(model, "gang", "LM", 10, 8, 12 * HOUR)
    pol._note_arrival(gang, HOUR)
    assert pol.arrival_cost_s(gang, sim.view().at(HOUR), tuple(range(8))) == 0.0


def test_arrivals_are_forgotten_after_the_window(model):
    """One-GPU arrivals older than :data:`ARRIVAL_WINDOW_S` no longer set the rate; asking the
    price changes nothing (they are forgotten when the next arrival is noted), so a driver that
    asks more often decides the same."""
    from iadeep.sim import Simulator

    pol = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    sim = Simulator(_jobs([("x", 0, 1.0, 1, "ResNet-18", 64)]), pol, model, ClusterSpec(2, 4, 24.0), SimSettings())
    for i in range(5):
        pol._note_arrival(_request(model, f"r{i}", "ResNet-50", 128, 1, 600.0), i * HOUR)
    gang = _request(model, "gang", "LM", 10, 8, 12 * HOUR)
    assert pol.arrival_cost_s(gang, sim.view().at(5 * HOUR), tuple(range(8))) > 0.0
    late = sim.view().at(ARRIVAL_WINDOW_S + 10.0 * HOUR)
    assert pol.arrival_cost_s(gang, late, tuple(range(8))) == 0.0  # r0-r4 expired
    assert len(pol._arrivals) == 5 and len(pol._arrived) == 5  # asking forgot nothing
    pol._note_arrival(_request(model, "late", "ResNet-50", 128, 1, 600.0), ARRIVAL_WINDOW_S + 10.0 * HOUR)
    assert [a[1] for a in pol._arrivals] == ["late"]
    assert set(pol._arrived) == {"late"}


def test_a_restarted_policy_takes_the_log_back_and_prices_the_same(model):
    """What :attr:`on_arrival` is given, handed to a new policy (:meth:`remember_arrivals`, in any
    order, one job twice), gives the same price at every time: the rate of the one-GPU arrivals
    and the gang's lapse, which counts from when the first policy met it. Nothing is taken back
    twice."""
    from iadeep.sim import Simulator

    first = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    noted: list[tuple[float, JobRequest]] = []
    first.on_arrival = lambda t, job: noted.append((t, job))
    sim = Simulator(_jobs([("x", 0, 1.0, 1, "ResNet-18", 64)]), first, model, ClusterSpec(2, 4, 24.0), SimSettings())
    for i in range(11):
        first._note_arrival(_request(model, f"r{i}", "ResNet-50", 128, 1, 600.0), i * 0.5 * HOUR)
    gang = _request(model, "gang", "LM", 10, 8, 12 * HOUR)
    first._note_arrival(gang, 5 * HOUR)
    assert [j.job_id for _, j in noted] == [*(f"r{i}" for i in range(11)), "gang"]

    restarted = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    given = list(reversed(noted)) + noted[:2]
    assert restarted.remember_arrivals(given) == 12
    assert restarted.remember_arrivals(noted) == 0
    view = sim.view()
    for hours in (5.0, 8.0, 23.0, 24.0, 29.5):
        at = view.at(hours * HOUR)
        assert restarted.arrival_cost_s(gang, at, tuple(range(8))) == first.arrival_cost_s(gang, at, tuple(range(8)))
    assert restarted.arrival_cost_s(gang, view.at(5 * HOUR), tuple(range(8))) > 0.0
    assert restarted.arrival_cost_s(gang, view.at(29.5 * HOUR), tuple(range(8))) == 0.0  # lapsed, as for the first
    later = _request(model, "late", "ResNet-50", 128, 1, 600.0)
    for pol in (first, restarted):  # both forget the same expired arrivals when the next is noted
        pol._note_arrival(later, ARRIVAL_WINDOW_S + 3 * HOUR)
    kept = [sorted((t, str(j)) for t, j, _ in pol._arrivals) for pol in (first, restarted)]
    assert kept[0] == kept[1] and len(kept[0]) > 1  # arrivals at one time in either order
    assert restarted._arriving == first._arriving
    # a store that answers only after the policy met a job of its own: the two logs merge in order
    merged = make_policy("iadeep", model, predictor="oracle", price_arrivals=True)
    merged._note_arrival(_request(model, "own", "ResNet-50", 128, 1, 600.0), 6 * HOUR)
    assert merged.remember_arrivals(noted[:12]) == 12
    times = [t for t, _, _ in merged._arrivals]
    assert times == sorted(times) and len(times) == 13

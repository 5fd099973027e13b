"""``make bench`` (tuner part): trials a tuning session needs to reach within 5 % of the best
configuration, over every measured two-job pair of Gavel's V100 data, for three tuners:

* ``optuna`` - this project's tuner (:class:`iadeep.tuner.TuningStudy`): warm start with the
  configurations the online learner predicts best (``--warm``, 3;
  :func:`iadeep.tuner.predicted_warm_start`, as the coordinator and the simulator), then the
  running one, then TPE;
* ``rank`` - the policy core's previous rule (:class:`iadeep.policy._tuning.BatchSizeTuner`):
  measure configurations in the order of their predicted objective, the submitted one third;
* ``seed`` - a re-implementation of the seed's procedure: only the newest job is tuned; 5 probes
  at its original batch size -48, -32, -16, 0, +16 (mapped to the nearest measured size, repeats
  dropped), then GP-LCB (RBF kernel on log2 batch size, ``beta = 2``) over its measured sizes.

Predictions come from an :class:`~iadeep.interference.OnlineInterferenceLearner` fed with every
measured pair *except those of the same two model families* (no peeking at the pair's own data).
Measurements are the measured normalised throughputs with 3 % Gaussian noise (seeded); whether a
trial is within 5 % is judged on the noise-free objective. A tuner that never gets within 5 %
(the seed's, when the best configuration changes the other job) counts as not reached. Each
tuner may measure every feasible configuration (no stop rule) so that the count is comparable;
the default stop rule's own figures (trials per session, share that ended within 5 %) are
printed too. Also measured: the job SDK's etcd requests per job per second (8 jobs, real etcd).

Run: ``python benchmarks/tuner.py`` (writes ``--out`` JSON when given).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
from itertools import combinations_with_replacement
from pathlib import Path

import numpy as np


def gp_lcb_order(xs: list[float], measure, first: list[float], beta: float = 2.0, length: float = 1.0,
                 noise: float = 1e-3) -> list[float]:
    """Order in which GP-LCB (minimising ``-objective``) measures the points ``xs`` after ``first``."""
    done: list[float] = []
    ys: list[float] = []
    for x in first:
        if x not in done:
            done.append(x)
            ys.append(-measure(x))
    while len(done) < len(xs):
        X = np.array(done)
        y = np.array(ys)
        mu0 = y.mean()
        K = np.exp(-((X[:, None] - X[None, :]) ** 2) / (2 * length**2)) + noise * np.eye(len(X))
        Kinv = np.linalg.inv(K)
        best, best_x = math.inf, None
        for x in xs:
            if x in done:
                continue
            k = np.exp(-((X - x) ** 2) / (2 * length**2))
            m = mu0 + k @ Kinv @ (y - mu0)
            s = math.sqrt(max(1.0 - k @ Kinv @ k, 1e-12))
            lcb = m - beta * s
            if lcb < best:
                best, best_x = lcb, x
        done.append(best_x)
        ys.append(-measure(best_x))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--warm", type=int, default=3, help="predicted-best configurations measured first")
    ap.add_argument("--patience", type=int, default=None, help="stop rule's patience (default: StopRule's)")
    ap.add_argument("--budget", type=int, default=None, help="stop rule's budget (default: StopRule's, DEFAULT_TRIALS)")
    ap.add_argument("--skip-sdk", action="store_true")
    args = ap.parse_args(argv)

    from iadeep.datasets import fetch
    from iadeep.interference import InterferenceModel, InterferenceSample, OnlineInterferenceLearner
    from iadeep.jobtypes import JobType
    from iadeep.tuner import SearchSpace, StopRule, TunedJob, TuningStudy, predicted_warm_start

    model = InterferenceModel.from_file(fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json")
    types = model.types
    rng = random.Random(args.seed)
    learners: dict[frozenset, np.ndarray] = {}

    def predicted(fa: str, fb: str) -> np.ndarray:
        key = frozenset((fa, fb))
        if key not in learners:
            lr = OnlineInterferenceLearner(types)
            for i, a in enumerate(types):
                for j, b in enumerate(types):
                    if i != j and model.fits[i, j] and frozenset((a.model, b.model)) != key:
                        lr.observe(InterferenceSample(a, b, float(model.norm[i, j])))
            learners[key] = np.where(model.fits, lr.matrix(), 0.0)
        return learners[key]

    results: dict[str, list[float]] = {"optuna": [], "rank": [], "seed": []}
    stop_rule = {"trials": [], "within": []}
    pairs = 0
    t0 = time.perf_counter()
    tunable = [i for i, t in enumerate(types) if len(model.batch_sizes(t.model)) > 1]
    for ia, ib in combinations_with_replacement(tunable, 2):
        if not model.fits[ia, ib]:
            continue
        a, b = types[ia], types[ib]
        jobs = [TunedJob("a", a.model, a.batch_size, a.batch_size), TunedJob("b", b.model, b.batch_size, b.batch_size)]
        space = SearchSpace(model, jobs)
        configs = space.configurations()
        if len(configs) < 2:
            continue
        pairs += 1

        def truth(c):
            x = model.normalised(space.type_ids(c))
            return {"a": float(x[0]), "b": float(x[1])}

        def noisy(c):
            return {k: v * max(0.0, 1 + args.noise * rng.gauss(0, 1)) for k, v in truth(c).items()}

        true_val = {tuple(sorted(c.items())): space.objective(c, truth(c)) for c in configs}
        best = max(true_val.values())

        def reached(order) -> float:
            for n, c in enumerate(order, 1):
                if true_val[tuple(sorted(c.items()))] >= 0.95 * best:
                    return n
            return math.inf

        pred = predicted(a.model, b.model)
        ranked = [c for _, c in space.ranked(pred)]
        warm = predicted_warm_start(space, pred, args.warm)
        # this tuner, no stop rule (every configuration may be measured)
        study = TuningStudy(model, jobs, name="bench", warm_start=warm, seed=args.seed,
                            stop=StopRule(budget=len(configs), patience=len(configs)))
        order = []
        while (p := study.ask()) is not None:
            order.append(p.config)
            study.tell(p.trial, noisy(p.config))
        results["optuna"].append(reached(order))
        # this tuner with its default stop rule
        rule = StopRule(**{k: v for k, v in (("patience", args.patience), ("budget", args.budget)) if v is not None})
        study = TuningStudy(model, jobs, name="bench", warm_start=warm, seed=args.seed, stop=rule)
        while (p := study.ask()) is not None:
            study.tell(p.trial, noisy(p.config))
        out = study.outcome()
        stop_rule["trials"].append(out.trials)
        stop_rule["within"].append(true_val[tuple(sorted(out.best.items()))] >= 0.95 * best)
        # the core's previous rule: predicted order, the submitted configuration third
        current = space.current()
        rank_order = [c for c in ranked if c != current]
        rank_order.insert(min(2, len(rank_order)), current)
        results["rank"].append(reached(rank_order))
        # the seed's: the newest job (b) only, 5 probes then GP-LCB on log2 batch size
        sizes = list(space.options["b"])
        probes = []
        for d in (-48, -32, -16, 0, 16):
            near = min(sizes, key=lambda s: (abs(s - (b.batch_size + d)), s))
            probes.append(math.log2(near))
        feasible_b = [math.log2(s) for s in sizes if space.feasible({"a": a.batch_size, "b": s})]
        probes = [p for p in probes if p in feasible_b]

        def measure_b(x: float) -> float:
            c = {"a": a.batch_size, "b": int(round(2**x))}
            return space.objective(c, noisy(c))

        seed_order = gp_lcb_order(feasible_b, measure_b, probes) if feasible_b else []
        results["seed"].append(reached([{"a": a.batch_size, "b": int(round(2**x))} for x in seed_order]))
    wall = time.perf_counter() - t0

    def rank_pct(v: list[float], q: float) -> float:
        """Nearest-rank percentile (never interpolates with "not reached")."""
        s = sorted(v)
        return s[max(0, math.ceil(q / 100 * len(s)) - 1)]

    def summary(v: list[float]) -> dict:
        arr = np.array(v)
        ok = arr[np.isfinite(arr)]
        return {"median": rank_pct(v, 50), "p90": rank_pct(v, 90),
                "reached_share": float(len(ok) / len(arr)), "mean_when_reached": float(ok.mean()) if len(ok) else None}

    report = {"pairs": pairs, "wall_s": round(wall, 1), "noise": args.noise,
              "trials_to_within_5pct": {k: summary(v) for k, v in results.items()},
              "default_stop_rule": {"mean_trials": float(np.mean(stop_rule["trials"])),
                                    "p90_trials": float(np.percentile(stop_rule["trials"], 90)),
                                    "ended_within_5pct_share": float(np.mean(stop_rule["within"]))}}
    if not args.skip_sdk:
        report["sdk"] = sdk_requests()
    print(json.dumps(report, indent=2))
    print("\n| tuner | median | p90 | reached within 5 % |\n|---|---:|---:|---:|")
    for k, s in report["trials_to_within_5pct"].items():
        fmt = lambda x: "never" if math.isinf(x) else f"{x:g}"  # noqa: E731
        print(f"| {k} | {fmt(s['median'])} | {fmt(s['p90'])} | {s['reached_share']:.0%} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))
    return 0


def sdk_requests(jobs: int = 8, seconds: float = 10.0) -> dict:
    """etcd requests of ``jobs`` SDK jobs stepping every 5 ms for ``seconds``: while training
    (per job per second) and once per job (registration, opening the batch-size watch, completion)."""
    from iadeep.dev import LocalEtcd
    from iadeep.state import EtcdStateStore, StateSettings
    from iadeep.workload import Job, WorkloadSettings

    with tempfile.TemporaryDirectory() as d:
        etcd = LocalEtcd(Path(d), fsync=False).start()
        try:
            stores = [EtcdStateStore(StateSettings(endpoints=[etcd.endpoint], prefix="/bench")) for _ in range(jobs)]
            counts = [(0, 0, 0, 0.0)] * jobs

            def run(i: int) -> None:
                job = Job(f"job-{i}", 32, store=stores[i], settings=WorkloadSettings(pod_uid=f"job-{i}")).start()
                time.sleep(0.5)  # the watch thread opens its stream and reads the assigned size
                r0, t0 = stores[i].stats()["requests"], time.monotonic()
                end = t0 + seconds
                while time.monotonic() < end:
                    time.sleep(0.005)
                    job.step()
                r1, t1 = stores[i].stats()["requests"], time.monotonic()
                job.complete()
                counts[i] = (r0, r1 - r0, stores[i].stats()["requests"] - r1, t1 - t0)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for s in stores:
                s.close()
        finally:
            etcd.stop()
    training = sum(c[1] for c in counts) / sum(c[3] for c in counts)
    once = sum(c[0] + c[2] for c in counts) / jobs
    return {"jobs": jobs, "seconds": seconds, "etcd_requests_per_job_per_s_training": round(training, 3),
            "etcd_requests_per_job_once": round(once, 1)}


if __name__ == "__main__":
    sys.exit(main())

"""``make bench``: live replay throughput through the local control plane.

A Philly slice (default 1,000 jobs from job 40,000, arrivals rescaled to a mean offered load of
1.0) is replayed at ``--speedup`` (default 1000x) by the kubernetes backend of ``iadeep experiment
run`` on ``--nodes`` kwok nodes (default 1,000 x 8 GPUs): real kube-apiserver, kube-scheduler with
the ``iadeep-scheduler`` profile, kube-controller-manager (Jobs), kwok, our extender and the GPU
emulator, all on this machine. Prints jobs per wall-second and the per-job overhead breakdown
(medians, wall seconds): submission lag (behind the arrival clock), bind latency (arrival, the pod's gate removed, to
the extender's bind), start lag (bind to the emulator starting the work) and completion lag (work
done to the Job's Complete condition seen), and how far the live run is from the simulator on the
same slice and cluster (``iadeep experiment compare``'s parity: avg JCT, p99 and makespan of live
over simulated, the co-located pairs found by both; ``parity.md`` in the output folder). Target:
1,000 jobs at 1000x in under 10 min; live within 15 % of the simulator. Not a test: figures go to
the docs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--speedup", type=float, default=1000.0)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--policy", default="iadeep")
    ap.add_argument("--target-load", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="output folder (default: a temporary one)")
    args = ap.parse_args(argv)

    from iadeep.experiment import ExperimentConfig
    from iadeep.experiment import build_workload, fetch_inputs, run_compare

    out = args.out or tempfile.mkdtemp(prefix="iadeep-bench-live-")
    cfg = ExperimentConfig(jobs=args.jobs, policies=(args.policy,), nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                           target_load=args.target_load, backend="kubernetes", speedup=args.speedup, out=out)
    paths = fetch_inputs(cfg, progress=False)
    _, meta = build_workload(cfg, paths["trace"])
    t0 = time.perf_counter()
    figures = run_compare(cfg)[args.policy]  # the simulator, then the live replay, then the parity
    total = time.perf_counter() - t0
    metrics = json.loads((Path(out) / "live" / f"metrics-{args.policy}.json").read_text())
    b = metrics["breakdown_s"]
    report = {
        "jobs": meta["jobs"], "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "speedup": args.speedup,
        "trace_span_s": meta["span_s"], "replay_wall_s": round(metrics["wall_s"], 1), "total_wall_s": round(total, 1),
        "jobs_per_wall_s": round(metrics["jobs_per_wall_s"], 2), "reservations_left": metrics["reservations_left"],
        "failed_jobs": metrics["failed_jobs"], "cluster_timings_s": metrics["cluster_timings_s"],
        "overhead_ms_median": {"submission_lag": round(metrics["submit_lag_s_median"] * 1e3, 1),
                               "bind_latency": round(b["bind_latency_s_median"] * 1e3, 1),
                               "start_lag": round(b["start_lag_s_median"] * 1e3, 1),
                               "completion_lag": round(b["completion_lag_s_median"] * 1e3, 1)},
        "clock_held_s": round(metrics.get("clock_held_s") or 0.0, 1),
        "parity": {k: round(float(figures[k]), 4) for k in ("avg_jct_diff_rel", "p99_jct_diff_rel", "makespan_diff_rel",
                                                             "pairs_identical", "avg_jct_sim_s", "avg_jct_live_s")},
        "out": out,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make bench``: the full Philly trace (82,247 jobs) through the iadeep policy in the simulator.

Prints wall time, jobs/s, CPU time, the policy calls made and peak RSS (target from the issue: under 60 s and 2 GiB on a 2-core
machine). The cluster is sized so that the trace's mean offered load is about ``--load`` (default
0.9) on nodes of 8 x 24 GiB GPUs, which keeps it busy; arrivals keep the trace's own timing. Jobs
needing more GPUs than ``--max-gpus`` are dropped (counted). Not a test: figures go in the README.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="iadeep")
    ap.add_argument("--load", type=float, default=0.9, help="mean offered load the cluster is sized for")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--max-gpus", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=None, help="first N jobs only (default: all)")
    args = ap.parse_args(argv)

    from iadeep.datasets import fetch
    from iadeep.interference import InterferenceModel
    from iadeep.policy import make_policy
    from iadeep.sim import ClusterSpec, SimSettings, Simulator
    from iadeep.traces import TraceOptions, load_trace, offered_load

    t0 = time.perf_counter()
    jobs = load_trace("philly", fetch("philly", progress=False) / "philly.csv",
                      TraceOptions(max_gpus=args.max_gpus, n_jobs=args.jobs, seed=0))
    model = InterferenceModel.from_file(fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json")
    probe = offered_load(jobs, 1)
    nodes = max(math.ceil(probe.mean_load / args.load / args.gpus_per_node), math.ceil(args.max_gpus / args.gpus_per_node))
    cluster = ClusterSpec(nodes, args.gpus_per_node, 24.0)
    load = offered_load(jobs, cluster.total_gpus)
    t_load = time.perf_counter() - t0
    print(f"{len(jobs)} jobs (dropped {dict(jobs.attrs.get('dropped', {}))}), cluster {nodes} x {args.gpus_per_node} GPUs, "
          f"offered load mean {load.mean_load:.2f} peak {load.peak_load:.2f}; loading took {t_load:.1f} s", flush=True)
    t1, c1 = time.perf_counter(), time.process_time()
    sim = Simulator(jobs, make_policy(args.policy, model), model, cluster, SimSettings(record_timeline=False))
    result = sim.run()
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    s = result.summary()
    print(f"policy {args.policy}: simulated {len(jobs)} jobs in {wall:.1f} s wall ({len(jobs) / wall:,.0f} jobs/s; "
          f"{cpu:.1f} s CPU, the figure to compare on a busy machine), "
          f"peak RSS {rss_gib:.2f} GiB")
    print(f"  avg JCT {s['avg_jct_s'] / 3600:.2f} h, p99 {s['p99_jct_s'] / 3600:.1f} h, makespan {s['makespan_s'] / 86400:.1f} d, "
          f"GPU utilisation {s['gpu_utilisation']:.2f}, mean slowdown {s['mean_slowdown']:.2f}")
    print(f"  outcome to the last digit (compare code versions with it): avg_jct_s {s['avg_jct_s']!r} "
          f"p99_jct_s {s['p99_jct_s']!r} makespan_s {s['makespan_s']!r}")
    c = sim.calls
    print(f"  policy calls: {c['place']:,} place ({c['place'] / len(jobs):.1f} per job; {c['skipped_by_hint']:,} retries skipped by "
          f"the queueing hint), {c['tune']:,} tune")
    ok = wall < 60 and rss_gib < 2
    print(f"target (< 60 s, < 2 GiB): {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

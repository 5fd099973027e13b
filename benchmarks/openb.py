"""``make bench``: the whole openb trace on its own cluster (from its node list), all four policies.

The Alibaba GPU-sharing trace (8,152 pods; the GPU pods that ran) replayed with its own timing on
the 1,213-node cluster of ``openb_node_list_gpu_node.csv`` (GPU shares, GPU models and Gavel's
per-type speeds on), through iadeep, exclusive, antman and gandiva one after the other in one
process. Prints wall time per policy and in total, and the process's peak RSS (target from issue
10: under 60 s and 2 GiB for all four together on 2 cores). Not a test: figures go in the README.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="iadeep,exclusive,antman,gandiva")
    ap.add_argument("--mix", default="iadeep")
    args = ap.parse_args(argv)

    from iadeep.datasets import fetch
    from iadeep.interference import InterferenceModel
    from iadeep.policy import make_policy
    from iadeep.sim import SimSettings, Simulator, cluster_from_openb, feasibility, type_speeds
    from iadeep.traces import TraceOptions, load_trace, offered_load

    t0 = time.perf_counter()
    folder = fetch("openb", progress=False)
    thr = fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json"
    cluster = cluster_from_openb(folder / "openb_node_list_gpu_node.csv")
    jobs = load_trace("openb", folder / "openb_pod_list_default.csv",
                      TraceOptions(cluster_gpus=cluster.total_gpus, mix=args.mix, seed=0))
    model = InterferenceModel.from_file(thr)
    why = feasibility(jobs, model, cluster)
    dropped = dict(jobs.attrs["dropped"])
    for reason in sorted(set(why.tolist()) - {""}):
        dropped[reason] = int((why == reason).sum())
    jobs = jobs.loc[why == ""].reset_index(drop=True)
    speeds = type_speeds(thr, model)
    load = offered_load(jobs, cluster.total_gpus)
    t_load = time.perf_counter() - t0
    print(f"openb: {len(jobs)} jobs (rows {jobs.attrs['rows_read']}; left out {dropped}; flagged {jobs.attrs['flagged']}); "
          f"cluster {cluster.nodes} nodes / {cluster.total_gpus} GPUs; offered load mean {load.mean_load:.3f}, "
          f"peak {load.peak_load:.3f}; loading took {t_load:.1f} s", flush=True)
    total = 0.0
    for name in args.policies.split(","):
        t1 = time.perf_counter()
        r = Simulator(jobs, make_policy(name, model), model, cluster, SimSettings(record_timeline=False),
                      speeds=speeds).run()
        wall = time.perf_counter() - t1
        total += wall
        s = r.summary()
        print(f"  {name:<9} {wall:6.1f} s wall; avg JCT {s['avg_jct_s'] / 3600:.2f} h (censored {s['censored_jobs']} excluded), "
              f"p99 {s['p99_jct_s'] / 3600:.1f} h, avg queueing {s['avg_queueing_s']:.0f} s, "
              f"GPU utilisation {s['gpu_utilisation']:.3f}", flush=True)
    use = resource.getrusage(resource.RUSAGE_SELF)
    rss_gib = use.ru_maxrss / 2**20
    print(f"all {len(args.policies.split(','))} policies: {total:.1f} s simulation wall time "
          f"({total + t_load:.1f} s with loading; process CPU time {use.ru_utime + use.ru_stime:.1f} s), "
          f"peak RSS {rss_gib:.2f} GiB")
    cpu = use.ru_utime + use.ru_stime
    ok = min(cpu, total + t_load) < 60 and rss_gib < 2
    load1 = os.getloadavg()[0]
    print(f"target (< 60 s, < 2 GiB for all four): {'met' if ok else 'MISSED'} "
          f"(single-threaded: on an idle machine wall time ~ CPU time; load average now {load1:.1f} "
          f"on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

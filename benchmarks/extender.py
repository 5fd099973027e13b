"""Scheduler-extender benchmark (run by hand, not a test): 1,000 nodes x 8 GPUs on loopback.

    .venv/bin/python benchmarks/extender.py                 # bind through the real kube-apiserver
    .venv/bin/python benchmarks/extender.py --kube null     # bind without Kubernetes (extender + etcd only)
    .venv/bin/python benchmarks/extender.py --json out.json

What runs: a real etcd (``LocalEtcd``, fsync on unless ``--no-fsync``) holding 1,000 published
node inventories; the extender as its own process (``uvicorn``, one worker, as deployed), so its
RSS is its own; with ``--kube controlplane`` the local control plane (``make controlplane``) with
the pods created up front (their Bindings go to the 1,000 node names; no Node objects are needed
for that). The client, ``benchmarks/extenderload`` (Go like kube-scheduler itself, so that its own cost per pod
is kube-scheduler's order; built here with the Go toolchain ``make controlplane`` needs anyway),
plays kube-scheduler:

1. latency: for each pod in turn ``filter`` (the candidate nodes, ``NodeNames``: as many as
   kube-scheduler sends, see :func:`feasible_nodes_to_find`, in a window that moves round the
   cluster as kube-scheduler's search does), ``prioritize``,
   ``bind`` — client-side latency of each call (HTTP on loopback included): p50/p99;
2. throughput: one scheduling loop (filter + prioritize, one pod at a time, as kube-scheduler's
   scheduling cycle) hands binds to ``--bind-workers`` threads (kube-scheduler binds
   asynchronously); sustained pods/s over ``--pods`` pods;
   with the CPU time (user + system) each process spent per pod in that phase;
3. breakdown (in this process, same data, see :func:`_breakdown`): what the extender pays once
   (listing the state, building the view) and per pod (policy, reservation, watch batch).

Targets from the issue: p99 < 5 ms per call, >= 500 pods/s, RSS < 300 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODELS = [("ResNet-18", 16), ("ResNet-50", 32), ("Transformer", 32), ("LM", 20), ("Recommendation", 1024)]


# -- the extender process ---------------------------------------------------------------------

class NullPodApi:
    """A :class:`~iadeep.extender.PodApi` that binds nothing (``--kube null``)."""

    def read_pod(self, namespace: str, name: str) -> Any:
        """The benchmark's pod ``bench-<i>`` as the API server would return it (a bind that reaches
        a replica or worker that did not filter the pod reads it)."""
        from iadeep.extender import KubeError, Pod

        if not name.startswith("bench-") or not name[6:].isdigit():
            raise KubeError(f"pods {name!r} not found", 404)
        return Pod.model_validate(pod_body(int(name[6:]), namespace, null_uid(namespace, name)))

    def bind(self, *args: Any, **kwargs: Any) -> None:
        pass

    def pods(self) -> list:
        return []

    def list_pods(self) -> tuple[list, str]:
        return [], "1"

    def watch_pods(self, resource_version: str, *, timeout_s: float) -> Any:
        time.sleep(timeout_s)  # no pods ever change
        return iter(())

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def annotate_node(self, name: str, annotations: Any) -> None:
        pass  # the benchmark's nodes have no Node objects

    def gang_pods(self, namespace: str, gang: str) -> list:
        return []  # the benchmark's pods are single-pod jobs


def null_uid(namespace: str, name: str) -> str:
    """The UID of a benchmark pod without Kubernetes (``--kube null``): derived from its name, so
    that :class:`NullPodApi` can answer a read of it."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"iadeep-bench/{namespace}/{name}"))


def bench_app() -> Any:
    """The extender app of the benchmark (uvicorn factory; settings from the environment, the
    Kubernetes side from ``IADEEP_BENCH_KUBE``: ``null`` or a kubeconfig)."""
    from iadeep.extender import ExtenderService, ExtenderSettings, KubernetesPodApi, create_app
    from iadeep.interference import InterferenceModel
    from iadeep.state import EtcdStateStore

    kube = os.environ["IADEEP_BENCH_KUBE"]
    settings = ExtenderSettings(kube={"kubeconfig": None if kube == "null" else kube}, cache={"sweep_interval_s": 0})
    api = NullPodApi() if kube == "null" else KubernetesPodApi(settings.kube)
    model = InterferenceModel.from_file(settings.throughputs_file)
    return create_app(service=ExtenderService(settings, store=EtcdStateStore(settings.etcd), pod_api=api, model=model))


def serve(argv: list[str]) -> None:
    """The extender process: ``extender.py _serve PORT NULL|KUBECONFIG WORKERS`` (etcd from IADEEP_ETCD_*),
    uvicorn as ``iadeep extender serve`` runs it."""
    import logging

    import uvicorn

    port, kube, workers = int(argv[0]), argv[1], int(argv[2])
    logging.basicConfig(level="WARNING")
    os.environ["IADEEP_BENCH_KUBE"] = kube
    uvicorn.run("extender:bench_app", factory=True, workers=workers, app_dir=str(Path(__file__).parent),
                host="127.0.0.1", port=port, log_level="warning", access_log=False)


class ProcessTree:
    """CPU and RSS of a process and its children (uvicorn's workers), summed (psutil)."""

    def __init__(self, pid: int):
        import psutil

        self.root = psutil.Process(pid)

    def _all(self) -> list[Any]:
        return [self.root, *self.root.children(recursive=True)]

    def cpu_s(self) -> float:
        return sum(p.cpu_times().user + p.cpu_times().system for p in self._all())

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in self._all())


# -- the client -------------------------------------------------------------------------------

def feasible_nodes_to_find(n_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler looks for before it stops filtering, i.e. how many it
    hands to an extender's filter: ``numFeasibleNodesToFind`` in kube-scheduler's
    ``pkg/scheduler/schedule_one.go`` (v1.36.3): adaptive ``50 - n/125`` percent (at least 5 %)
    when ``percentageOfNodesToScore`` is unset, and never fewer than 100 nodes."""
    if n_nodes < 100:
        return n_nodes
    if percentage == 0:
        percentage = max(50 - n_nodes // 125, 5)
    return max(n_nodes * percentage // 100, 100)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] if values else float("nan")


def pod_body(i: int, namespace: str, uid: str) -> dict:
    model, bs = MODELS[i % len(MODELS)]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"bench-{i}", "namespace": namespace, "uid": uid,
                     "annotations": {"iadeep.io/model": model, "iadeep.io/batch-size": str(bs), "iadeep.io/duration-s": "3600"}},
        "spec": {"schedulerName": "iadeep-scheduler", "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "registry.invalid/iadeep/trainer:fake",
            "resources": {"limits": {"iadeep.io/gpu-mem": "8"}, "requests": {"iadeep.io/gpu-mem": "8", "cpu": "100m"}}}]},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx
    import psutil

    from iadeep.testing import free_port
    from iadeep.dev import LocalEtcd
    from iadeep.state import EtcdStateStore, GpuInfo, NodeInventory, StateSettings

    throughputs = args.throughputs or _throughputs()
    work = Path(tempfile.mkdtemp(prefix="iadeep-bench-extender-"))
    etcd = LocalEtcd(work / "etcd", fsync=args.fsync).start()
    cp = None
    proc = None
    try:
        state = StateSettings(endpoints=[etcd.endpoint], prefix="/bench")
        store = EtcdStateStore(state)
        names = [f"node-{i:04d}" for i in range(args.nodes)]
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda n: store.put_inventory(NodeInventory(n, tuple(GpuInfo(g, args.gpu_mem_gib, f"GPU-{n}-{g}")
                                                                              for g in range(args.gpus)))), names))
        preloaded = _preload(store, names, args) if args.preload else 0
        total = args.warmup + args.latency_pods + args.pods
        namespace = "bench"
        uids = [null_uid(namespace, f"bench-{i}") for i in range(total)]
        kube = "null"
        if args.kube == "controlplane":
            from kubernetes import client

            from iadeep.dev import ControlPlane

            # the benchmark's nodes exist only in the extender's inventory: without Node objects the
            # pod garbage collector deletes the bound pods as orphans (and the pod watch then
            # releases their reservations mid-run), so it is switched off here
            cp = ControlPlane(nodes=0, workdir=work / "cp",
                              extra_args={"kube-controller-manager": ["--controllers=*,-pod-garbage-collector-controller"]}).start()
            cp.create_namespace(namespace)
            core = client.CoreV1Api(cp.api_client())
            t0 = time.perf_counter()

            def create(i: int) -> str:
                body = pod_body(i, namespace, "")
                body["metadata"].pop("uid")
                body["spec"]["schedulerName"] = "nobody"  # only our bind acts on them
                return core.create_namespaced_pod(namespace, body).metadata.uid

            with ThreadPoolExecutor(8) as ex:
                uids = list(ex.map(create, range(total)))
            print(f"created {total} pods in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            kube = str(cp.kubeconfig)

        port = free_port()
        env = dict(os.environ, IADEEP_ETCD_ENDPOINTS=etcd.endpoint, IADEEP_ETCD_PREFIX="/bench",
                   IADEEP_EXTENDER_THROUGHPUTS_FILE=str(throughputs))
        log = (work / "extender.log").open("wb")
        proc = subprocess.Popen([sys.executable, __file__, "_serve", str(port), kube, str(args.workers)], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        http = httpx.Client(base_url=url, timeout=60, limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        deadline = time.monotonic() + 60
        while True:
            try:
                if http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"extender did not get ready; log: {work / 'extender.log'}")
            time.sleep(0.1)
        tree = ProcessTree(proc.pid)
        rss_idle = tree.rss()
        # kube-scheduler starts each cycle's node search where the last one stopped: rotate the window
        def window(i: int) -> list[str]:
            k = (i * args.candidates) % len(names)
            return (names[k:] + names[:k])[: args.candidates]

        candidates = window(0)
        pods = [{"name": f"bench-{i}", "namespace": namespace, "uid": uids[i],
                 "args": {"Pod": pod_body(i, namespace, uids[i]), "NodeNames": window(i)}} for i in range(total)]
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                try:
                    peak[0] = max(peak[0], tree.rss())
                except psutil.Error:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        procs = {"extender": tree, "etcd": ProcessTree(etcd.proc.pid), "client": _Client()}
        if cp is not None:  # the control plane's API server and its own etcd take CPU too
            procs["kube-apiserver"] = ProcessTree(cp.procs["kube-apiserver"].pid)
            procs["apiserver-etcd"] = ProcessTree(cp.procs["etcd"].pid)
        measured = _go_client(url, pods, args, work, procs)
        phases = _bind_phases(http.get("/metrics").text)
        stop.set()
        sampler.join()
        rss_end = tree.rss()
        assignments = store.assignments()
        per_gpu: dict[tuple[str, int], float] = {}
        for a in assignments:
            per_gpu[(a.node, a.gpu)] = per_gpu.get((a.node, a.gpu), 0.0) + a.mem_gib
        bound = len({a.pod_uid for a in assignments}) - preloaded
        assert bound == total - measured["unschedulable"], (bound, total, measured["unschedulable"])
        assert max(per_gpu.values()) <= args.gpu_mem_gib
        pods_per_gpu = len(assignments) / (args.nodes * args.gpus)
        tuning_requests = len(store.tuning_requests())
        breakdown = _breakdown(throughputs, store, names, candidates, args)
        http.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if cp is not None:
            cp.stop()
        etcd.stop()

    mib = 1024 * 1024
    lat = measured["latency_ms"]
    bind_lat = measured["bind_ms_under_load"]
    return {
        "setup": {"nodes": args.nodes, "gpus_per_node": args.gpus, "candidates_per_call": len(candidates),
                  "kube": args.kube, "etcd_fsync": args.fsync, "latency_pods": args.latency_pods,
                  "throughput_pods": args.pods, "bind_workers": args.bind_workers, "extender_workers": args.workers,
                  "preload_jobs_per_gpu": args.preload, "cpus": os.cpu_count()},
        "load": {"pods_per_gpu_at_end": round(pods_per_gpu, 2), "unschedulable": measured["unschedulable"],
                 "tuning_requests": tuning_requests},
        "latency_ms": {v: {"p50": round(statistics.median(x), 2), "p99": round(pct(x, 99), 2)} for v, x in lat.items()},
        "throughput": {"pods_per_s": round(len(bind_lat) / measured["throughput_wall_s"], 1),
                       "wall_s": round(measured["throughput_wall_s"], 2),
                       "pods_bound": len(bind_lat),
                       "bind_p50_ms_under_load": round(statistics.median(bind_lat), 2),
                       "bind_p99_ms_under_load": round(pct(bind_lat, 99), 2),
                       "binds_refused_and_rescheduled": measured["binds_refused_and_rescheduled"],
                       "cpu_ms_per_pod": measured["cpu_ms_per_pod"]},
        "bind_phase_mean_ms": phases,
        "rss_mib": {"idle": round(rss_idle / mib, 1), "peak": round(max(peak[0], rss_end) / mib, 1), "end": round(rss_end / mib, 1)},
        "breakdown_ms": breakdown,
    }


class _Client:
    """This process and its finished children (the Go client runs as one): CPU seconds."""

    def cpu_s(self) -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system


def _cpu_s(procs: dict[str, Any]) -> dict[str, float]:
    """User + system CPU seconds of each process (tree) so far."""
    return {k: p.cpu_s() for k, p in procs.items()}


def _bind_phases(text: str) -> dict[str, float]:
    """Mean milliseconds per bind phase over the whole run, from the extender's
    ``iadeep_extender_bind_phase_seconds`` histogram (where binds wait under load)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "iadeep_extender_bind_phase_seconds":
            continue
        for sample in family.samples:
            phase = sample.labels.get("phase", "")
            if sample.name.endswith("_sum"):
                sums[phase] = sample.value
            elif sample.name.endswith("_count"):
                counts[phase] = sample.value
    return {k: round(1e3 * sums[k] / counts[k], 2) for k in sorted(sums) if counts.get(k)}


def _preload(store: Any, names: list[str], args: argparse.Namespace) -> int:
    """Reserve ``args.preload`` job(s) on every GPU through the state store (the extender lists them at
    start), cycling through :data:`MODELS` with a week of work each (waiting for them is long, so the
    policy co-locates where a pair is predicted to share well); returns how many."""
    from iadeep.state import JobRecord

    now = time.time()
    slots = [(n, g) for n in names for g in range(args.gpus)]

    def reserve(i: int) -> None:
        node, gpu = slots[i]
        model, bs = MODELS[i % len(MODELS)]
        job = JobRecord(str(uuid.uuid5(uuid.NAMESPACE_URL, f"iadeep-bench/preload/{i}")), "preload", f"pre-{i}", model, bs,
                        1, 8.0, remaining_s=7 * 86400.0, submitted_at=now)
        store.reserve(job, node, [gpu], colocation_limit=2, now_s=now)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(reserve, range(len(slots))))
    print(f"preloaded {len(slots)} jobs in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return len(slots)


def _go_client(url: str, pods: list[dict], args: argparse.Namespace, work: Path, procs: dict[str, Any]) -> dict[str, Any]:
    """Run ``benchmarks/extenderload`` (Go, built here with the Go toolchain): warm-up, latency and
    throughput phases; the throughput phase's CPU is read from psutil around a second run that
    only does that phase, so that the latency phase does not count."""
    binary = work / "extenderload"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=REPO / "benchmarks" / "extenderload", check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    n1 = args.warmup + args.latency_pods
    phases = [(pods[:n1], args.warmup, args.latency_pods, 0), (pods[n1:], 0, 0, args.pods)]
    results = []
    for chunk, warmup, latency, throughput in phases:
        requests = work / "requests.json"
        requests.write_text(json.dumps({"prefix": "/iadeep", "pods": chunk}))
        cpu0 = _cpu_s(procs)
        done = subprocess.run([str(binary), "-requests", str(requests), "-url", url, "-warmup", str(warmup),
                               "-latency", str(latency), "-throughput", str(throughput),
                               "-bind-workers", str(args.bind_workers)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"extenderload failed: {done.stderr.strip()}")
        cpu1 = _cpu_s(procs)
        results.append((json.loads(done.stdout), {k: cpu1[k] - cpu0[k] for k in cpu0}))
    (lat, _), (thr, cpu) = results
    return {"latency_ms": lat["latency_ms"], "throughput_wall_s": thr["throughput_wall_s"],
            "bind_ms_under_load": thr["bind_ms_under_load"],
            "binds_refused_and_rescheduled": lat["binds_refused_and_rescheduled"] + thr["binds_refused_and_rescheduled"],
            "unschedulable": lat["unschedulable"] + thr["unschedulable"],
            "cpu_ms_per_pod": {k: round(1e3 * v / args.pods, 2) for k, v in cpu.items()}}


def _breakdown(throughputs: Path, store: Any, names: list[str], candidates: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Median cost (ms) of the pieces, measured in this process on the same state: what the
    extender pays once (listing the state, building the view arrays) and per pod (the policy's
    assessment of the candidates, the placement on the chosen node, the reservation transaction
    with and without the copy's records as a hint, applying the reservation's watch batch)."""
    from iadeep.extender import Snapshot, StateCache, TypeResolver, ViewBase
    from iadeep.interference import InterferenceModel
    from iadeep.policy import make_policy
    from iadeep.state import ChangeBatch, JobRecord, NodeRecords

    model = InterferenceModel.from_file(throughputs)
    types = TypeResolver(model, "ResNet-50", 64)
    policy = make_policy("iadeep", model)
    out: dict[str, list[float]] = {k: [] for k in (
        "once_list_state", "once_view_build", "policy_assess", "policy_place_one_node", "etcd_reserve_txn_hinted",
        "etcd_reserve_txn_read_first", "etcd_release_txn", "cache_apply_watch_batch")}
    t = time.perf_counter()
    listing = store.list_state()
    out["once_list_state"].append(time.perf_counter() - t)
    snap = Snapshot(listing.inventories, listing.gpu_states, listing.jobs, time.time())
    t = time.perf_counter()
    base = ViewBase.from_snapshot(snap, types, slots=policy.limit)
    out["once_view_build"].append(time.perf_counter() - t)
    job = JobRecord("x", "bench", "x", "ResNet-18", 16, 1, 8.0, remaining_s=3600.0)
    tid = types.resolve("ResNet-18", 16)
    for _ in range(20):
        view, req = base.with_job(job, tid, now_s=time.time())
        t = time.perf_counter()
        policy.assess(req, view, candidates)
        out["policy_assess"].append(time.perf_counter() - t)
        v1, r1 = base.restrict(names[-1]).with_job(job, tid, now_s=time.time())
        t = time.perf_counter()
        policy.place(r1, v1)
        out["policy_place_one_node"].append(time.perf_counter() - t)
    cache = StateCache(store, types, slots=policy.limit)
    cache.refresh()
    for i in range(50):
        node = names[-1 - (i % 10)]
        j = JobRecord(f"probe-{i}", "bench", "probe", "ResNet-18", 16, 1, 1.0, remaining_s=1.0)
        hint = NodeRecords(listing.inventories[node], {g.index: store.gpu_states().get((node, g.index))
                                                        for g in listing.inventories[node].gpus})
        rev = store.revision()
        t = time.perf_counter()
        store.reserve(j, node, [args.gpus - 1], colocation_limit=1000, now_s=time.time(), known=hint)
        out["etcd_reserve_txn_hinted"].append(time.perf_counter() - t)
        batch = next(iter(store.changes(rev + 1, idle_s=5.0)))
        t = time.perf_counter()
        cache.apply_batch(ChangeBatch(batch.revision, batch.changes))
        out["cache_apply_watch_batch"].append(time.perf_counter() - t)
        t = time.perf_counter()
        store.release(j.pod_uid, now_s=time.time())
        out["etcd_release_txn"].append(time.perf_counter() - t)
        t = time.perf_counter()
        store.reserve(j, node, [args.gpus - 1], colocation_limit=1000, now_s=time.time())
        out["etcd_reserve_txn_read_first"].append(time.perf_counter() - t)
        store.release(j.pod_uid, now_s=time.time())
    return {k: round(1e3 * statistics.median(v), 3) for k, v in out.items()}


def _throughputs() -> Path:
    from iadeep.datasets import fetch

    mirror = os.environ.get("IADEEP_DATASET_MIRROR") or str(REPO.parent / "shared" / "data")
    return fetch("gavel-throughputs", progress=False, mirror=mirror) / "simulation_throughputs.json"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--gpu-mem-gib", type=float, default=32.0)
    p.add_argument("--candidates", type=int, default=None,
                   help="nodes per filter/prioritize call (default: as many as kube-scheduler sends with our manifests' "
                        "default percentageOfNodesToScore, 420 of 1,000; 1000 = percentageOfNodesToScore: 100)")
    p.add_argument("--latency-pods", type=int, default=300)
    p.add_argument("--pods", type=int, default=1000, help="pods in the throughput phase")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--bind-workers", type=int, default=16)
    p.add_argument("--workers", type=int, default=1, help="extender server processes (iadeep extender serve --workers)")
    p.add_argument("--kube", choices=["controlplane", "null"], default="controlplane")
    p.add_argument("--fsync", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--preload", type=int, default=0, choices=[0, 1],
                   help="jobs reserved on every GPU before the run (1: every pod is priced against a co-location, "
                        "every bind writes a tuning request)")
    p.add_argument("--throughputs", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if args.candidates is None:
        args.candidates = feasible_nodes_to_find(args.nodes)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

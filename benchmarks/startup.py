"""``make bench``: start-up and output cost as ratios, and the full trace as CPU seconds and instructions.

Wall-clock figures on a shared machine vary from day to day, so each is measured beside what it
is compared with, in the same minute:

1. ``iadeep --help`` over a bare ``python -c pass`` (interleaved runs, medians; target <= 5x);
2. a 500-job single-policy ``iadeep experiment run``: the whole process over its simulation loop
   (``wall_s`` of ``metrics-iadeep.json``, timed inside the process around ``simulate``; target <= 2x);
3. the full Philly trace, the four policies, through ``iadeep experiment run`` as CPU seconds of
   the whole process tree (the policies' worker processes included), beside the same run of the
   previous commit (a ``git worktree`` of ``--baseline``, default ``HEAD~1``, on ``PYTHONPATH`` and
   as the working directory, which ``python -m`` puts first on ``sys.path``);
4. instructions per job under callgrind (valgrind), the four policies' simulations of a slice of
   the main job, beside the previous commit's: ``(Ir(n2) - Ir(n1)) / (n2 - n1)``, so that start-up
   (imports, reading the trace) cancels out.

Options: ``--skip-full`` and ``--skip-callgrind`` leave out 3 and 4 (the slow parts, about 5 and
10 CPU minutes on a 2-core machine); ``--baseline none`` measures the working tree alone.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
#: The full trace's run: trace timing on a cluster of 8-GPU nodes sized for a mean offered load of
#: 0.9 (as benchmarks/run.py), jobs wider than 64 GPUs dropped.
FULL_LOAD, FULL_GPUS_PER_NODE, FULL_MAX_GPUS = 0.9, 8, 64


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}


def _wall(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> float:
    """Wall seconds of ``cmd``, run in ``cwd``: ``python -m``/``-c`` put their working directory
    first on ``sys.path``, ahead of ``PYTHONPATH``, so a tree's processes run in that tree."""
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def imported_from(tree: Path) -> Path:
    """The ``iadeep`` package a process of ``tree`` imports (run as :func:`_wall` runs it)."""
    out = subprocess.run([PY, "-c", "import iadeep, os; print(os.path.dirname(iadeep.__file__))"], env=_env(tree),
                         cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
    return Path(out).resolve().parent


def _verdict(ratio: float, target: float) -> str:
    return f"target <= {target:g}x: {'met' if ratio <= target else 'MISSED'}"


def help_ratio(reps: int) -> None:
    """``iadeep --help`` and ``python -c pass``, one after the other, ``reps`` times each."""
    env = _env(ROOT)
    _wall([PY, "-m", "iadeep.cli", "--help"], env)  # bytecode compiled, files in the page cache
    bare, cli = [], []
    for _ in range(reps):
        bare.append(_wall([PY, "-c", "pass"], env))
        cli.append(_wall([PY, "-m", "iadeep.cli", "--help"], env))
    b, c = statistics.median(bare), statistics.median(cli)
    print(f"  iadeep --help {c * 1e3:.0f} ms, python -c pass {b * 1e3:.0f} ms (medians of {reps}): "
          f"{c / b:.1f}x ({_verdict(c / b, 5)})", flush=True)


def run_ratio(reps: int, jobs: int = 500) -> None:
    """The whole ``iadeep experiment run`` process over its simulation loop, one policy."""
    env = _env(ROOT)
    whole, loop = [], []
    with tempfile.TemporaryDirectory(prefix="iadeep-bench-") as tmp:
        cmd = [PY, "-m", "iadeep.cli", "experiment", "run", "--jobs", str(jobs), "--policies", "iadeep", "--out", tmp]
        _wall(cmd, env)  # the datasets fetched into the cache, bytecode compiled
        for _ in range(reps):
            whole.append(_wall(cmd, env))
            loop.append(json.loads((Path(tmp) / "metrics-iadeep.json").read_text())["wall_s"])
    imports = statistics.median(_wall([PY, "-c", "import iadeep.experiment._cli, iadeep.experiment._steps"], env)
                                for _ in range(reps))
    w, lp = statistics.median(whole), statistics.median(loop)
    print(f"  experiment run, {jobs} jobs, iadeep: whole process {w:.2f} s, simulation loop {lp:.2f} s (medians of "
          f"{reps}): {w / lp:.1f}x ({_verdict(w / lp, 2)}); the rest: starting Python and importing the run's "
          f"modules {imports:.2f} s, reading the trace and writing the results and plots {w - lp - imports:.2f} s",
          flush=True)


# -- the full trace, as CPU seconds --------------------------------------------------------------

def _subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``),
    so that a process that outlives its parent (multiprocessing's forkserver) still counts in
    ``RUSAGE_CHILDREN`` once reaped here."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _full_cluster_nodes() -> int:
    from iadeep.datasets import fetch
    from iadeep.traces import TraceOptions, load_trace, offered_load

    jobs = load_trace("philly", fetch("philly", progress=False) / "philly.csv", TraceOptions(max_gpus=FULL_MAX_GPUS, seed=0))
    probe = offered_load(jobs, 1)
    return max(math.ceil(probe.mean_load / FULL_LOAD / FULL_GPUS_PER_NODE), math.ceil(FULL_MAX_GPUS / FULL_GPUS_PER_NODE))


def full_trace(tree: Path, nodes: int, out: Path) -> tuple[float, float]:
    """The full trace, four policies, through ``iadeep experiment run`` of ``tree``: (CPU s, wall s)."""
    cmd = [PY, "-m", "iadeep.cli", "experiment", "run", "--start-job", "0", "--jobs", "0", "--target-load", "0",
           "--max-gpus", str(FULL_MAX_GPUS), "--nodes", str(nodes), "--gpus-per-node", str(FULL_GPUS_PER_NODE),
           "--gpu-mem-gib", "24", "--out", str(out)]
    _reap()
    c0 = _cpu_children()
    wall = _wall(cmd, _env(tree), cwd=tree)
    _reap()  # the forkserver, which leaves after its parent
    return _cpu_children() - c0, wall


# -- instructions per job (callgrind) --------------------------------------------------------------

SLICE_DRIVER = """
import sys, tempfile
from iadeep.experiment import ExperimentConfig, build_workload, fetch_inputs, run_policy
cfg = ExperimentConfig(jobs=int(sys.argv[1]), out=tempfile.mkdtemp(prefix="iadeep-cg-"))
paths = fetch_inputs(cfg, progress=False)
workload, _ = build_workload(cfg, paths["trace"], paths["throughputs"])
for name in cfg.policies:
    run_policy(cfg, name, workload, paths["throughputs"])
"""


def _instructions(tree: Path, jobs: int, tmp: Path) -> int:
    """Instructions (callgrind's Ir) of the slice driver over ``jobs`` jobs of the main job."""
    out = tmp / f"cg-{tree.name}-{jobs}.out"
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=no", "--branch-sim=no", f"--callgrind-out-file={out}",
                    PY, "-c", SLICE_DRIVER, str(jobs)], env=_env(tree), cwd=tree, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    m = re.search(r"^summary:\s+(\d+)", out.read_text(errors="replace"), re.MULTILINE)
    if m is None:
        raise RuntimeError(f"no 'summary:' line in {out}")
    return int(m.group(1))


def instructions_per_job(tree: Path, n1: int, n2: int, tmp: Path) -> float:
    return (_instructions(tree, n2, tmp) - _instructions(tree, n1, tmp)) / (n2 - n1)


# -- the previous commit ---------------------------------------------------------------------------

def baseline_tree(ref: str, tmp: Path) -> tuple[Path, str] | None:
    """A detached worktree of ``ref`` under ``tmp`` and its short hash; ``None`` without git or that ref."""
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True,
                             check=True).stdout.strip()
        path = tmp / f"baseline-{sha}"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha], capture_output=True,
                       check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"  (no baseline: {ref} cannot be checked out: {exc})")
        return None
    return path, sha


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="repetitions of --help and of python -c pass")
    ap.add_argument("--run-reps", type=int, default=3, help="repetitions of the 500-job run")
    ap.add_argument("--baseline", default="HEAD~1", help="git ref compared with (none: no comparison)")
    ap.add_argument("--skip-full", action="store_true", help="leave out the full trace (CPU seconds)")
    ap.add_argument("--skip-callgrind", action="store_true", help="leave out instructions per job")
    ap.add_argument("--slice", default="40,240", help="callgrind: the two slice sizes n1,n2 (jobs of the main job)")
    args = ap.parse_args(argv)

    print("start-up and output (ratios of times measured side by side):")
    help_ratio(args.reps)
    run_ratio(args.run_reps)
    if args.skip_full and args.skip_callgrind:
        return 0
    with tempfile.TemporaryDirectory(prefix="iadeep-bench-") as tmp_s:
        tmp = Path(tmp_s)
        trees = [("working tree", ROOT)]
        base = None if args.baseline == "none" else baseline_tree(args.baseline, tmp)
        if base is not None:
            trees.append((f"{args.baseline} ({base[1]})", base[0]))
        for label, tree in trees:  # each side measures its own code, not the checkout's
            if (where := imported_from(tree)) != tree.resolve():
                raise RuntimeError(f"{label}: a process of {tree} imports iadeep from {where}")
        try:
            if not args.skip_full:
                counted = _subreaper()
                nodes = _full_cluster_nodes()
                print(f"full Philly trace, four policies, {nodes} x {FULL_GPUS_PER_NODE} GPUs, trace timing "
                      f"(CPU seconds of the process tree{'' if counted else '; processes that outlive iadeep not counted'}):")
                outcome = {}
                for label, tree in trees:
                    out = tmp / f"full-{tree.name}"
                    try:
                        cpu, wall = full_trace(tree, nodes, out)
                    except subprocess.CalledProcessError as exc:
                        print(f"  {label}: failed ({exc})")
                        continue
                    outcome[label] = json.loads((out / "summary.json").read_text())["policies"]
                    print(f"  {label:<24} {cpu:7.1f} CPU s ({wall:.1f} s wall)", flush=True)
                if len(outcome) == 2:
                    same = len({json.dumps(v) for v in outcome.values()}) == 1
                    print(f"  per-policy results identical to the baseline's: {same}")
                    if not same:  # what differs, as avg JCT (h) per policy: working tree vs baseline
                        (_, new), (_, old) = outcome.items()
                        for name in new:
                            a, b = new[name]["avg_jct_s"] / 3600, old.get(name, {}).get("avg_jct_s", float("nan")) / 3600
                            print(f"    {name:<10} avg JCT {a:.3f} h vs {b:.3f} h")
            if not args.skip_callgrind:
                if shutil.which("valgrind") is None:
                    print("instructions per job: no valgrind (Debian: apt-get install valgrind)")
                else:
                    n1, n2 = (int(x) for x in args.slice.split(","))
                    print(f"instructions per job (callgrind Ir; the main job's first {n1} and {n2} jobs, four "
                          f"policies: (Ir({n2}) - Ir({n1})) / {n2 - n1}):")
                    for label, tree in trees:
                        try:
                            ipj = instructions_per_job(tree, n1, n2, tmp)
                        except (subprocess.CalledProcessError, RuntimeError) as exc:
                            print(f"  {label}: failed ({exc})")
                            continue
                        print(f"  {label:<24} {ipj / 1e6:9.1f} M instructions per job", flush=True)
        finally:
            if base is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base[0])], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

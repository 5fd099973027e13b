"""An emulated training job: a process that uses the job reporting SDK (:mod:`iadeep.workload`)
and runs at the speed the measured interference data gives it, plus noise.

The GPU is emulated by a folder shared by the jobs "on" it: each job keeps the file
``<gpu-dir>/<pod>`` holding its current job type (model and batch size) and reads its partners'
files. A step of type ``t`` next to partners ``p_1..p_k`` lasts
``1 / (isolated[t] * prod_k norm[t, p_k] * (1 + noise * N(0, 1)))`` seconds (Gavel's isolated
steps/s and pairwise normalised throughputs; the multiplicative rule of the core for more jobs).
A pair measured not to fit makes both jobs crawl at 1 % speed (an out-of-memory pair).

Run: ``python -m iadeep.testing.emulated_job --pod P --model ResNet-50 --batch-size 64
--gpu-dir DIR --throughputs FILE --duration-s 30`` with ``IADEEP_ETCD_*`` set (reports to etcd)
or not (logs only). It ends after ``--duration-s`` or when ``<gpu-dir>/<pod>.stop`` appears,
reporting completion, and removes its file from the folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path

from iadeep.interference import InterferenceModel
from iadeep.jobtypes import JobType
from iadeep.state import EtcdStateStore, StateSettings
from iadeep.workload import Job, WorkloadSettings

__all__ = ["main", "step_seconds"]


def step_seconds(model: InterferenceModel, me: JobType, partners: list[JobType], noise: float, rng: random.Random) -> float:
    """Duration of one step (s) of ``me`` next to ``partners`` (module docstring)."""
    t = model.type_id(me)
    rate = float(model.isolated_steps_per_s[t])
    for p in partners:
        x = float(model.norm[t, model.type_id(p)])
        rate *= x if x > 0 else 0.01
    rate *= max(0.05, 1.0 + noise * rng.gauss(0.0, 1.0))
    return 1.0 / rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pod", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--gpu-dir", type=Path, required=True)
    ap.add_argument("--throughputs", type=Path, required=True)
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {a.pod} %(levelname)s %(message)s")
    model = InterferenceModel.from_file(a.throughputs)
    rng = random.Random(a.seed)
    mine = a.gpu_dir / a.pod
    stop = a.gpu_dir / f"{a.pod}.stop"

    def publish(batch: int) -> None:
        tmp = mine.with_suffix(".tmp")
        tmp.write_text(json.dumps([a.model, batch]))
        tmp.replace(mine)

    publish(a.batch_size)
    settings = WorkloadSettings(pod_uid=a.pod)
    store = EtcdStateStore(StateSettings()) if settings.etcd_enabled() else None
    job = Job(a.pod, a.batch_size, store=store, settings=settings)
    partners: list[JobType] = []
    seen = 0.0
    end = time.monotonic() + a.duration_s
    with job:
        batch = job.batch_size
        while time.monotonic() < end and not stop.exists():
            if time.monotonic() - seen > 0.1:
                partners = []
                for f in a.gpu_dir.iterdir():
                    if f.suffix or f.name == a.pod:
                        continue
                    try:
                        m, b = json.loads(f.read_text())
                    except (OSError, ValueError):
                        continue
                    partners.append(JobType(m, int(b)))
                seen = time.monotonic()
            time.sleep(step_seconds(model, JobType(a.model, batch), partners, a.noise, rng))
            new = job.step()
            if new != batch:
                batch = new
                publish(batch)
    mine.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

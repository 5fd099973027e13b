"""Windows of real traces where iadeep is known to lose, kept as strict expected failures.

Each window comes from a fresh draw of ``iadeep experiment sweep --draw 64`` (its setting name
says trace, first job, target load, mix seed and cluster); the expected outcome is the guard's
(at most 1.02 x the better packing baseline's avg JCT and never above exclusive's). The
mechanism of each loss is measured in docs/design/2026-12-05-a-gang-on-every-gpu.md. A fix makes
a test pass, which fails it until its mark is removed.
"""

from __future__ import annotations

import pytest

from iadeep.experiment._config import ExperimentConfig
from iadeep.experiment._steps import build_workload, run_policy

#: philly-13006-2.94-1746748334-4x4 (draw 5151): a 97-h 16-GPU gang starts on every GPU of the
#: cluster, a 134-h 8-GPU job joins it on half of them, 397 1-GPU jobs of 0.81 h queue behind
EVERY_GPU = dict(trace="philly", start_job=13006, target_load=2.94, seed=1746748334, nodes=4, gpus_per_node=4)


def _avg_jct_h(cfg: ExperimentConfig, policy: str, workload, throughputs) -> float:
    return run_policy(cfg, policy, workload, throughputs).summary(cfg.include_censored)["avg_jct_s"] / 3600.0


@pytest.mark.parametrize("queue", [
    pytest.param("kube", marks=pytest.mark.xfail(strict=True, reason=(
        "a gang on every GPU (docs/design/2026-12-05-a-gang-on-every-gpu.md): measured 14.5 x exclusive"))),
    pytest.param("fifo", marks=pytest.mark.xfail(strict=True, reason=(
        "a gang on every GPU (docs/design/2026-12-05-a-gang-on-every-gpu.md): measured 52 x antman"))),
])
def test_a_gang_on_every_gpu_does_not_starve_the_short_jobs(philly_path, throughputs_path, tmp_path, queue):
    """The 1-GPU jobs are 397 of the window's 400 jobs: exclusive runs them on the GPUs the 8-GPU job
    leaves free (they queue 0.00 h; the gang waits 138 h for the whole cluster), antman beside the
    gang (first fit, never a ban: 0.6 h). iadeep must be within the guard of both."""
    cfg = ExperimentConfig(**EVERY_GPU, queue=queue, out=str(tmp_path))
    workload, _ = build_workload(cfg, philly_path, throughputs_path)
    assert len(workload) == 400
    jct = {p: _avg_jct_h(cfg, p, workload, throughputs_path) for p in ("iadeep", "exclusive", "antman", "gandiva")}
    assert jct["iadeep"] <= 1.02 * min(jct["antman"], jct["gandiva"]), jct
    assert jct["iadeep"] <= 1.02 * jct["exclusive"], jct

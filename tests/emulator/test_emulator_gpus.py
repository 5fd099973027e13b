"""The emulator's bookkeeping: rates of co-located sets, completion times and measurements."""

from __future__ import annotations

import numpy as np
import pytest

from iadeep.emulator import EmulatedGpus, node_inventory
from iadeep.jobtypes import JobType


def _t(model, family, batch):
    return model.type_id(JobType(family, batch))


def test_a_job_alone_finishes_after_its_work_divided_by_the_speedup(model):
    gpus = EmulatedGpus(model)
    (change,) = gpus.start("a", "n", [0], _t(model, "ResNet-50", 64), 3600.0, now_s=100.0, speedup=1000.0)
    assert change.rate == 1.0
    assert gpus.next_due() == pytest.approx(103.6)
    assert gpus.due(103.5) == [] and gpus.due(103.6) == ["a"]


def test_a_job_brought_up_to_date_after_its_finish_keeps_its_finish_time(model):
    """The service completes a done job only when its completer gets to it; meanwhile the
    progress writer (``progress_of``) and its partners' changes sync the job to later times.
    Its finish time must stay the moment its work reached zero (seen in the 1,000-job live
    benchmark: jobs alone on a GPU ended up to 500 x their work later, as late as the completer)."""
    a, b = _t(model, "ResNet-50", 64), _t(model, "ResNet-18", 16)
    gpus = EmulatedGpus(model)
    gpus.start("a", "n", [0], a, 3600.0, now_s=100.0, speedup=1000.0)
    assert gpus.progress_of("a", 110.0) == 0.0  # synced 6.4 s after the finish
    gpus.start("b", "n", [0], b, 3600.0, now_s=120.0, speedup=1000.0)  # a partner arrives later still
    job = gpus.jobs["a"]
    assert gpus.finish_time(job) == pytest.approx(103.6)
    assert gpus.due(125.0) == ["a"]


def test_colocated_jobs_run_at_the_models_rate_and_speed_up_when_the_partner_leaves(model):
    a, b = _t(model, "ResNet-50", 64), _t(model, "ResNet-18", 16)
    na, nb = model.normalised([a, b])
    assert na < 1 and nb < 1  # a pair that interferes
    gpus = EmulatedGpus(model)
    gpus.start("a", "n", [0], a, 1000.0, now_s=0.0, speedup=10.0)
    changes = {c.uid: c.rate for c in gpus.start("b", "n", [0], b, 50.0, now_s=1.0, speedup=10.0)}
    assert changes == pytest.approx({"a": min(na, 1.0), "b": min(nb, 1.0)})
    # b finishes after 50 / (nb x 10) wall seconds; a did 10 s of work alone, then na x 10 per second
    t_b = 1.0 + 50.0 / (nb * 10.0)
    assert gpus.next_due() == pytest.approx(t_b)
    assert gpus.due(t_b) == ["b"]
    (after,) = gpus.stop("b", now_s=t_b)
    assert after.uid == "a" and after.rate == 1.0
    left = 1000.0 - 10.0 - na * 10.0 * (t_b - 1.0)
    assert gpus.progress_of("a", t_b) == pytest.approx(left)
    assert gpus.next_due() == pytest.approx(t_b + left / 10.0)


def test_a_gang_advances_at_its_slowest_gpu(model):
    a, b = _t(model, "ResNet-50", 64), _t(model, "ResNet-18", 16)
    gpus = EmulatedGpus(model)
    gpus.start("gang", "n", [0, 1], a, 100.0, now_s=0.0, speedup=1.0)
    changes = {c.uid: c for c in gpus.start("b", "n", [1], b, 100.0, now_s=0.0, speedup=1.0)}
    assert changes["gang"].rate == pytest.approx(min(model.normalised([a, b])[0], 1.0))
    assert gpus.jobs["gang"].rate < 1.0  # GPU 0 alone would be 1.0


def test_measurements_are_noisy_around_the_true_throughput(model):
    a, b = _t(model, "ResNet-50", 64), _t(model, "ResNet-18", 16)
    gpus = EmulatedGpus(model, seed=1, measurement_noise=0.05)
    gpus.start("a", "n", [0], a, 100.0, now_s=0.0, speedup=1.0)
    gpus.start("b", "n", [0], b, 100.0, now_s=0.0, speedup=1.0)
    true = model.isolated_steps_per_s[a] * model.normalised([a, b])[0]
    xs = np.array([gpus.measure("a") for _ in range(2000)])
    assert np.median(xs) == pytest.approx(true, rel=0.01)
    assert np.std(np.log(xs)) == pytest.approx(0.05, rel=0.1)


def test_node_inventory_from_annotation_or_labels():
    by_annotation = {"metadata": {"name": "n1", "annotations": {
        "iadeep.io/gpus": '[{"index":0,"uuid":"GPU-x","memGiB":24},{"index":1,"uuid":"GPU-y","memGiB":24}]'}}}
    inv = node_inventory(by_annotation)
    assert inv.node == "n1" and [(g.index, g.mem_gib, g.uuid) for g in inv.gpus] == [(0, 24.0, "GPU-x"), (1, 24.0, "GPU-y")]
    by_labels = {"metadata": {"name": "n2", "labels": {"iadeep.io/gpu-count": "4", "iadeep.io/gpu-mem-gib": "32"}}}
    assert [g.mem_gib for g in node_inventory(by_labels).gpus] == [32.0] * 4
    assert node_inventory({"metadata": {"name": "cpu-only"}}) is None
    with pytest.raises(ValueError, match="n3"):
        node_inventory({"metadata": {"name": "n3", "annotations": {"iadeep.io/gpus": "not json"}}})

"""Every workload trains a few steps on the CPU from the real-format files, reporting to a real etcd;
batch size switches mid-run when etcd says so; checkpoint and resume continue the same run."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from pathlib import Path

import msgspec
import pytest
import torch

from iadeep.interference import memory_gib
from iadeep.jobtypes import JobType
from iadeep.state import EtcdStateStore, JobRecord
from iadeep.training import MODELS, StateReporter, defaults_of
from iadeep.training._runner import RunSettings, run, scaled_lr

SMALL_BATCH = {"vgg16": 4, "resnet50": 4, "squeezenet": 8, "lstm": 8, "neumf": 64}
STEPS = {"vgg16": 2, "resnet50": 2, "squeezenet": 3, "lstm": 3, "neumf": 3}  # VGG-16: 134 M parameters on 1 CPU thread


def _settings(model: str, datasets: dict, **kw) -> RunSettings:
    d = defaults_of(model)
    base = dict(model=model, batch_size=SMALL_BATCH[model], data_dir=datasets["root"] / d.dataset, tiny=True, threads=1,
                pod_uid=f"uid-{model}", name=f"job-{model}", mem_gib=2.0, device="cpu")
    base.update(kw)
    return RunSettings(**base)


def _wait(predicate, timeout_s: float = 60.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.mark.parametrize("model", MODELS)
def test_each_workload_trains_and_reports_to_etcd(model: str, datasets: dict, store: EtcdStateStore) -> None:
    reporter = StateReporter(store, interval_s=0.0, watch_idle_s=0.5)
    steps = STEPS[model]
    result = run(_settings(model, datasets, max_steps=steps), reporter)
    assert result.outcome.reason == "max_steps" and result.outcome.step == steps
    assert result.samples == steps * SMALL_BATCH[model]
    job = store.jobs()[f"uid-{model}"]
    assert (job.model, job.batch_size, job.name) == (defaults_of(model).gavel_family, SMALL_BATCH[model], f"job-{model}")
    reports = store.measurements(f"uid-{model}")
    assert len(reports) == steps - 1  # step 1 opens the first window
    assert all(m.batch_size == SMALL_BATCH[model] and m.steps_per_s > 0 and math.isfinite(m.steps_per_s) for m in reports)


def test_epochs_evaluate_and_stop_at_target(datasets: dict, tmp_path: Path) -> None:
    from iadeep.training import LogReporter

    # 120 tiny training images at batch 50: 3 steps per epoch (the last one partial).
    result = run(_settings("squeezenet", datasets, batch_size=50, max_epochs=2), LogReporter())
    assert result.outcome.reason == "max_epochs" and result.outcome.step == 6 and result.samples == 240
    assert [e for e, _ in result.metrics] == [0, 1] and all(0.0 <= m <= 1.0 for _, m in result.metrics)
    reached = run(_settings("squeezenet", datasets, batch_size=50, target=0.0, patience=1), LogReporter())
    assert reached.outcome.reason == "target" and reached.outcome.epoch == 1 and reached.outcome.step == 3
    perplexity = run(_settings("lstm", datasets, batch_size=64, max_epochs=1), LogReporter())
    assert perplexity.metrics[0][1] > 1.0  # a perplexity, not an accuracy


def test_batch_size_follows_etcd_mid_epoch(datasets: dict, store: EtcdStateStore) -> None:
    settings = _settings("lstm", datasets, batch_size=4, max_epochs=50)
    reporter = StateReporter(store, interval_s=0.0, watch_idle_s=0.5)
    stop = threading.Event()
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("result", run(settings, reporter, stop=stop)))
    worker.start()
    try:
        _wait(lambda: store.measurements("uid-lstm"))
        record = store.jobs()["uid-lstm"]
        store.put_job(msgspec.structs.replace(record, batch_size=12))  # what the coordinator writes
        _wait(lambda: any(m.batch_size == 12 for m in store.measurements("uid-lstm")))
    finally:
        stop.set()
        worker.join(timeout=120)
    result = out["result"]
    assert result.outcome.reason == "stopped"
    (first, start), (switch_step, new) = result.batch_sizes
    assert (first, start, new) == (0, 4, 12) and switch_step > 0
    # Mid-epoch: the switch did not wait for an epoch boundary (an epoch here is ~60 steps of 4).
    assert result.outcome.epoch == 0


def test_learning_rate_scaling_rule() -> None:
    adam = defaults_of("vgg16")  # batch 512, lr 1e-3, decay 0.7 per epoch
    assert scaled_lr(adam, 512, 0) == pytest.approx(1e-3)
    assert scaled_lr(adam, 128, 0) == pytest.approx(1e-3 * 0.5)  # square root of 1/4
    assert scaled_lr(adam, 2048, 2) == pytest.approx(1e-3 * 2 * 0.49)
    sgd = dataclasses.replace(adam, optimizer="sgd", lr_decay_per_epoch=1.0)
    assert scaled_lr(sgd, 128, 5) == pytest.approx(1e-3 / 4)  # linear


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_checkpoint_resume_equals_an_uninterrupted_run(datasets: dict, tmp_path: Path, monkeypatch) -> None:
    """lstm has dropout: equal weights need the RNG state restored too; neumf draws negatives per epoch."""
    import iadeep.training._runner as runner
    from iadeep.training import LogReporter

    built: list = []
    real_build = runner.build_task
    monkeypatch.setattr(runner, "build_task", lambda *a: built.append(real_build(*a)) or built[-1])
    for model, steps in (("lstm", 6), ("neumf", 8)):
        built.clear()
        straight = run(_settings(model, datasets, max_steps=steps, checkpoint_every_steps=0), LogReporter())
        want = _params(built[-1].model)
        ckpt = tmp_path / model
        first = run(_settings(model, datasets, max_steps=steps // 2, checkpoint_dir=ckpt, checkpoint_every_steps=0), LogReporter())
        assert first.resumed_from_step is None and (ckpt / "checkpoint.pt").is_file()
        second = run(_settings(model, datasets, max_steps=steps, checkpoint_dir=ckpt, checkpoint_every_steps=0), LogReporter())
        assert second.resumed_from_step == steps // 2 and second.outcome.step == steps
        assert second.samples == straight.samples
        for got, expected in zip(_params(built[-1].model), want):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_checkpoint_of_another_workload_is_refused(datasets: dict, tmp_path: Path) -> None:
    from iadeep.training import LogReporter

    run(_settings("neumf", datasets, max_steps=1, checkpoint_dir=tmp_path), LogReporter())
    with pytest.raises(ValueError, match="checkpoint .* is of workload 'neumf', not 'lstm'"):
        run(_settings("lstm", datasets, max_steps=1, checkpoint_dir=tmp_path), LogReporter())
    (tmp_path / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="unreadable"):
        run(_settings("neumf", datasets, max_steps=1, checkpoint_dir=tmp_path), LogReporter())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown workload 'alexnet'"):
        RunSettings(model="alexnet")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        RunSettings(model="vgg16", batch_size=0)


def test_cli_bench_job_reports_to_etcd(datasets: dict, etcd_settings, monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from iadeep.cli import app

    monkeypatch.setenv("IADEEP_ETCD_ENDPOINTS", ",".join(etcd_settings.endpoints))
    monkeypatch.setenv("IADEEP_ETCD_PREFIX", etcd_settings.prefix)
    monkeypatch.setenv("IADEEP_POD_UID", "pod-cli")
    monkeypatch.setenv("IADEEP_POD_NAME", "squeeze-1")
    res = CliRunner().invoke(app, ["bench-job", "squeezenet", "--max-steps", "4", "--batch-size", "8", "--tiny", "--threads", "1",
                                   "--data-dir", str(datasets["root"] / "cifar-10"), "--report-interval-s", "0",
                                   "--checkpoint-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "max_steps after 4 steps" in res.output
    store = EtcdStateStore(etcd_settings)
    try:
        mem = memory_gib(JobType("ResNet-18", 8))  # the documented estimate, as the Job template requests
        assert store.jobs()["pod-cli"] == JobRecord("pod-cli", "default", "squeeze-1", "ResNet-18", 8, 1, mem,
                                                     submitted_at=store.jobs()["pod-cli"].submitted_at)
        assert len(store.measurements("pod-cli")) == 3
    finally:
        store.close()
    bad = CliRunner().invoke(app, ["bench-job", "squeezenet", "--max-steps", "1", "--data-dir", str(tmp_path / "none"), "--report", "log"])
    assert bad.exit_code == 2 and "cifar-10: dataset folder" in bad.output

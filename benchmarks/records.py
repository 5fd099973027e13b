"""Record codec micro-benchmark (run by hand, not a test): CPU time of ``to_json`` and ``from_json``.

    .venv/bin/python benchmarks/records.py
    .venv/bin/python benchmarks/records.py --against /path/to/other/checkout   # side by side

What runs: one set of records as a reservation writes them and a follower reads them (a node
inventory of 8 GPUs, a job record, an assignment, a GPU state of two pods, a tuning request, a
measurement, an undo record), encoded and decoded ``--rounds`` times each, in this process; the
figure is CPU time (``time.process_time``) per record, best of ``--repeats``. With ``--against``
the same records are built from that checkout's ``iadeep/state/_records.py`` (loaded from its file
under another module name; it must need nothing of iadeep beyond itself) and measured in turns
with this one, and the ratio (other / this) is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from iadeep import state


def load_records(checkout: Path) -> ModuleType:
    """``checkout``'s records module, loaded from its file as ``_bench_records``."""
    path = checkout / "iadeep" / "state" / "_records.py"
    spec = importlib.util.spec_from_file_location("_bench_records", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no records module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sample(m: Any) -> list[Any]:
    """The records of one reservation and its follower's read, built from module ``m``."""
    return [
        m.NodeInventory("node-0001", tuple(m.GpuInfo(i, 32.0, f"GPU-{i:04d}", "V100M32") for i in range(8))),
        m.JobRecord("uid-1", "default", "train-1", "ResNet-50", 64, 1, 12.5, 3600.0, 1700000000.25),
        m.Assignment("uid-1", "node-0001", 3, 12.5, 1700000000.25),
        m.GpuState("node-0001", 3, 20.5, ("uid-0", "uid-1")),
        m.TuningRequest("node-0001", 3, ("uid-0", "uid-1"), 1700000000.25),
        m.Measurement("uid-1", 3.25, 64, 1700000010.5, samples=6400),
        m.UndoRecord("uid-1", "default", "train-1", "node-0001", 3, (m.BannedType("ResNet-50", 64), m.BannedType("LM", 5)),
                     0.8, 0.95, session="node-0001.3.1", reason="co-location undone", at=1700000020.0),
    ]


def measure(m: Any, rounds: int, repeats: int) -> dict[str, float]:
    """CPU microseconds per record of ``m.to_json`` and ``m.from_json`` (best of ``repeats``)."""
    records = sample(m)
    texts = [(type(r), m.to_json(r)) for r in records]
    n = rounds * len(records)
    best = {"encode_us": float("inf"), "decode_us": float("inf")}
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(rounds):
            for r in records:
                m.to_json(r)
        t1 = time.process_time()
        for _ in range(rounds):
            for cls, text in texts:
                m.from_json(cls, text)
        t2 = time.process_time()
        best["encode_us"] = min(best["encode_us"], (t1 - t0) / n * 1e6)
        best["decode_us"] = min(best["decode_us"], (t2 - t1) / n * 1e6)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another checkout to measure side by side")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    this = measure(state, args.rounds, args.repeats)
    if args.against is None:
        print(f"this: encode {this['encode_us']:.2f} us/record, decode {this['decode_us']:.2f} us/record")
        return
    other_module = load_records(args.against)
    other = measure(other_module, args.rounds, args.repeats)
    again = measure(state, args.rounds, args.repeats)  # in turns: this, other, this
    this = {k: min(v, again[k]) for k, v in this.items()}
    for k in ("encode_us", "decode_us"):
        print(f"{k[:6]}: other {other[k]:.2f} us/record, this {this[k]:.2f} us/record, "
              f"other/this {other[k] / this[k]:.2f}")


if __name__ == "__main__":
    main()

"""Write Gavel's throughput table with the interference taken out: a ceiling for any co-location policy.

Every co-located pair that Gavel measured (both throughputs above 0, so the pair fits on one GPU)
gets each job's isolated throughput (its ``"null"`` entry): two jobs on one GPU each run as if
alone. Pairs that do not fit stay as they are, so memory, the two-jobs-per-GPU limit, gangs and the
queue are unchanged. No real pair does better than that, so a policy's avg JCT on this table
bounds from below what better pairing could give it on the measured one
(:func:`iadeep.interference.without_interference`; ``iadeep experiment sweep --ceiling`` runs it
for every setting). Usage::

    .venv/bin/python tools/zero_interference.py runs/zero-interference.json
    .venv/bin/iadeep experiment sweep --throughputs runs/zero-interference.json --predictor oracle \\
        --policies iadeep,antman,gandiva --out runs/sweep-zero-interference

The input is the registry's ``gavel-throughputs`` (``--input`` for another file in Gavel's schema:
``table[gpu_type][job][other job or "null"]``, a pair as ``[this job's, the other's]`` steps/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iadeep.interference import without_interference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="where to write the table (JSON)")
    parser.add_argument("--input", type=Path, help="a table in Gavel's schema (default: the registry's gavel-throughputs)")
    args = parser.parse_args(argv)
    if args.input is None:
        from iadeep.datasets import fetch

        args.input = fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json"
    try:
        table = json.loads(args.input.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"{args.input}: {exc}")
    if not isinstance(table, dict):
        parser.error(f"{args.input}: not a table in Gavel's schema (a JSON object of GPU types)")
    new, changed = without_interference(table)
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(new))
    except OSError as exc:
        parser.error(f"{args.output}: cannot write: {exc.strerror or exc}")
    print(f"{args.output}: {changed} co-located pairs at their isolated throughputs (from {args.input})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Clusters as data: YAML cluster files, and clusters derived from a trace's own node list.

A cluster file::

    # iadeep cluster file
    groups:
      - count: 549          # nodes of this shape
        gpus_per_node: 8
        gpu_mem_gib: 32     # memory of each GPU (GiB)
        gpu_model: G2       # as the trace names it ("" = unnamed)
        name: g2            # optional node-name prefix
      - {count: 387, gpus_per_node: 2, gpu_mem_gib: 16, gpu_model: T4}

Derived clusters: openb's ``openb_node_list_gpu_node.csv`` (``sn, cpu_milli, memory_mib, gpu,
model``; 1,213 GPU nodes) and Philly's ``cluster_machine_list`` (``machineId, number of GPUs,
single GPU mem``; msr-fiddle/philly-traces), the latter with a consistency report against the
job log (:func:`philly_consistency`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from iadeep._files import read_json, read_text
from iadeep.sim._config import ClusterSpec, NodeGroup

__all__ = ["load_cluster", "dump_cluster", "cluster_from_openb", "cluster_from_philly", "philly_consistency",
           "ClusterFileError", "GPU_MEM_GIB", "PhillyConsistency"]

#: Memory (GiB) per GPU of the models openb names. Public models: the vendor's data sheet (T4 16,
#: A10 24, P100 16, V100 16 / 32 as the name says). G1-G3 are undisclosed (trace README): 32 GiB
#: is an assumption (they sit in 8-GPU training nodes like the V100M32 ones).
GPU_MEM_GIB: dict[str, float] = {"T4": 16.0, "A10": 24.0, "P100": 16.0, "V100M16": 16.0, "V100M32": 32.0,
                                 "G1": 32.0, "G2": 32.0, "G3": 32.0}
#: Memory assumed for a model not in :data:`GPU_MEM_GIB`.
DEFAULT_GPU_MEM_GIB = 16.0

_KEYS = {"count", "gpus_per_node", "gpu_mem_gib", "gpu_model", "name"}


class ClusterFileError(ValueError):
    """A cluster file (or node list) cannot be used; the message names the file and the entry."""


def _group(entry: Any, where: str) -> NodeGroup:
    if not isinstance(entry, dict):
        raise ClusterFileError(f"{where}: a node group must be a mapping, got {type(entry).__name__}")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ClusterFileError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    missing = {"count", "gpus_per_node", "gpu_mem_gib"} - set(entry)
    if missing:
        raise ClusterFileError(f"{where}: missing key(s) {sorted(missing)}")
    try:
        for key in ("count", "gpus_per_node"):
            v = entry[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v or v < 1:
                raise ValueError(f"{key}: expected a whole number >= 1, got {v!r}")
        count, gpus = entry["count"], entry["gpus_per_node"]
        mem = float(entry["gpu_mem_gib"])
        if not (math.isfinite(mem) and mem > 0):
            raise ValueError(f"gpu_mem_gib: expected a finite number of GiB > 0, got {entry['gpu_mem_gib']!r}")
        return NodeGroup(int(count), int(gpus), mem, str(entry.get("gpu_model") or ""), str(entry.get("name") or ""))
    except (TypeError, ValueError) as e:
        raise ClusterFileError(f"{where}: {e}") from None


def _read_csv(p: Path) -> pd.DataFrame:
    """``p`` as a table of strings; a file that is not one raises :class:`ClusterFileError` naming it."""
    try:
        return pd.read_csv(p, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise
    except pd.errors.EmptyDataError:
        raise ClusterFileError(f"{p}: empty file (expected a CSV header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ClusterFileError(f"{p}: not a CSV table: {' '.join(str(e).split())}") from None
    except IsADirectoryError:
        raise ClusterFileError(f"{p}: is a folder, not a CSV file") from None
    except OSError as e:
        raise ClusterFileError(f"{p}: cannot read: {e.strerror or e}") from None


def load_cluster(path: str | PathLike[str]) -> ClusterSpec:
    """Read a YAML cluster file (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        ClusterFileError: (a ``ValueError``) a folder or unreadable file, invalid YAML, no
            ``groups`` list, or a bad group: a missing or unknown key, a count or GPUs per node
            that is not a whole number >= 1, a ``gpu_mem_gib`` that is not a finite number > 0
            (the message names the file, the group's index and the key).
    """
    p = Path(path)
    text = read_text(p, "YAML cluster file", ClusterFileError)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ClusterFileError(f"{p}: invalid YAML: {e}") from None
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups:
        raise ClusterFileError(f"{p}: expected a mapping with a non-empty 'groups' list")
    return ClusterSpec(groups=tuple(_group(g, f"{p}: groups[{i}]") for i, g in enumerate(groups)))


def dump_cluster(spec: ClusterSpec, path: str | PathLike[str], comment: str = "") -> Path:
    """Write ``spec`` as a cluster file :func:`load_cluster` reads back to an equal spec."""
    groups = [{"count": g.count, "gpus_per_node": g.gpus_per_node, "gpu_mem_gib": g.gpu_mem_gib,
               "gpu_model": g.gpu_model, **({"name": g.name} if g.name else {})} for g in spec.node_groups()]
    head = "".join(f"# {line}\n" for line in (["iadeep cluster file"] + comment.splitlines()))
    p = Path(path)
    p.write_text(head + yaml.safe_dump({"groups": groups}, sort_keys=False))
    return p


def _groups_from_counts(counts: Counter) -> ClusterSpec:
    groups = []
    for (model, gpus, mem), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        name = f"{(model or 'node').lower()}-{gpus}g"
        groups.append(NodeGroup(n, gpus, mem, model, name))
    return ClusterSpec(groups=tuple(groups))


def cluster_from_openb(node_list: str | PathLike[str]) -> ClusterSpec:
    """The cluster of openb's node list (``openb_node_list_gpu_node.csv``): one group per (model, GPUs).

    Nodes with no GPU are left out. GPU memory per model: :data:`GPU_MEM_GIB`.

    Raises:
        FileNotFoundError: no such file.
        ClusterFileError: a folder, an empty file or one that is not CSV, a missing column, or a
            GPU count that is not a whole number (the message names the file, and the row).
    """
    p = Path(node_list)
    df = _read_csv(p)
    for col in ("sn", "gpu", "model"):
        if col not in df.columns:
            raise ClusterFileError(f"{p}: column {col!r} missing from the header {list(df.columns)}")
    counts: Counter = Counter()
    for i, (gpu, model) in enumerate(zip(df["gpu"], df["model"])):
        if not re.fullmatch(r"\d+", gpu.strip()):
            raise ClusterFileError(f"{p}:{i + 2}: column 'gpu': {gpu!r} is not a whole number")
        if int(gpu) > 0:
            model = model.strip()
            counts[(model, int(gpu), GPU_MEM_GIB.get(model, DEFAULT_GPU_MEM_GIB))] += 1
    if not counts:
        raise ClusterFileError(f"{p}: no node with a GPU")
    return _groups_from_counts(counts)


def _philly_machines(machine_list: str | PathLike[str]) -> pd.DataFrame:
    p = Path(machine_list)
    df = _read_csv(p)
    df.columns = [c.strip() for c in df.columns]
    cols = {"machineId": None, "number of GPUs": None, "single GPU mem": None}
    for c in cols:
        if c not in df.columns:
            raise ClusterFileError(f"{p}: column {c!r} missing from the header {list(df.columns)}")
    gpus, mems = [], []
    for i, (g, mem) in enumerate(zip(df["number of GPUs"], df["single GPU mem"])):
        if not re.fullmatch(r"\d+", g.strip()):
            raise ClusterFileError(f"{p}:{i + 2}: column 'number of GPUs': {g!r} is not a whole number")
        gpus.append(int(g))
        try:
            mems.append(float(mem.strip().rstrip("G").rstrip("GB")))
        except ValueError:
            raise ClusterFileError(f"{p}:{i + 2}: column 'single GPU mem': {mem!r} is not a number") from None
        if not math.isfinite(mems[-1]) or mems[-1] < 0 or (mems[-1] == 0 and gpus[-1] > 0):
            raise ClusterFileError(f"{p}:{i + 2}: column 'single GPU mem': {mem!r}: expected a finite number of GiB, "
                                   "> 0 on a machine with GPUs")
    return pd.DataFrame({"machine": df["machineId"].str.strip(), "gpus": gpus, "mem": mems})


def cluster_from_philly(machine_list: str | PathLike[str], job_log: str | PathLike[str] | None = None) -> ClusterSpec:
    """The cluster of Philly's ``cluster_machine_list``: one group per (GPUs, GPU memory).

    Philly's GPUs are unnamed in the trace (the paper: 12 GB and 24 GB GPUs); the model is ``""``.
    With ``job_log`` the cluster covers what the jobs used (:func:`philly_consistency`): each
    machine has ``max(listed, observed)`` GPUs, observed = the distinct GPU names the log's
    attempts used on it; a machine the log uses but the list lacks is added with its observed
    GPUs, each of :attr:`PhillyConsistency.unlisted_gpu_mem_gib`.

    Raises:
        FileNotFoundError: no such file.
        ClusterFileError: a folder, an empty file or one that is not CSV, a missing column, a
            ``number of GPUs`` that is not a whole number >= 0, or a ``single GPU mem`` (GiB, an
            optional ``G``/``GB`` suffix) that is not a finite number, negative, or 0 on a machine
            with GPUs (the message names the file, the line and the column); a job log that is a
            folder or not JSON.
    """
    m = _philly_machines(machine_list)
    rows = [(str(k), int(g), float(mem)) for k, g, mem in zip(m["machine"], m["gpus"], m["mem"])]
    if job_log is not None:
        report = _consistency(m, job_log)
        rows = [(k, max(g, report.used_gpus.get(k, 0)), mem) for k, g, mem in rows]
        rows += [(k, report.used_gpus[k], report.unlisted_gpu_mem_gib) for k in report.used_not_listed]
    counts: Counter = Counter((("", g, mem) for _, g, mem in rows if g > 0))
    if not counts:
        raise ClusterFileError(f"{machine_list}: no machine with a GPU")
    return _groups_from_counts(counts)


@dataclass
class PhillyConsistency:
    """The machine list checked against the job log.

    Attributes:
        machines_listed: machines in the list.
        machines_used: machines named by some attempt in the log.
        fewer_gpus_than_used: machine -> (GPUs listed, GPUs the log used on it), for the listed
            machines with fewer GPUs than used: :func:`cluster_from_philly` raises them to the
            second number.
        used_not_listed: machines jobs ran on that the list lacks (sorted): :func:`cluster_from_philly`
            adds them.
        used_gpus: machine -> GPUs the log used on it (distinct GPU names over all attempts).
        unlisted_gpu_mem_gib: GPU memory (GiB) given to the added machines: the list's most
            common ``single GPU mem`` (the smaller on a tie), the log has none; ``None`` for an
            empty list.
    """

    machines_listed: int
    machines_used: int
    fewer_gpus_than_used: dict[str, tuple[int, int]] = field(default_factory=dict)
    used_not_listed: list[str] = field(default_factory=list)
    used_gpus: dict[str, int] = field(default_factory=dict)
    unlisted_gpu_mem_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"machines_listed": self.machines_listed, "machines_used": self.machines_used,
                "fewer_gpus_than_used": {k: list(v) for k, v in self.fewer_gpus_than_used.items()},
                "used_not_listed": list(self.used_not_listed), "used_gpus": dict(self.used_gpus),
                "unlisted_gpu_mem_gib": self.unlisted_gpu_mem_gib}


def philly_consistency(machine_list: str | PathLike[str], job_log: str | PathLike[str]) -> PhillyConsistency:
    """Compare ``cluster_machine_list`` with ``cluster_job_log``'s ``attempts[].detail[]``.

    Reports machines listed with fewer GPUs than the log used on them (distinct GPU names over
    all its attempts on the machine), and machines used but not listed. Job-log entries that are
    not the documented shape are ignored here (the trace loader reports them).

    Raises:
        FileNotFoundError: either file missing.
        ClusterFileError: the machine list as :func:`cluster_from_philly`; a job log that is a
            folder or not JSON (the message names the file, and the line and column).
    """
    return _consistency(_philly_machines(machine_list), job_log)


def _consistency(m: pd.DataFrame, job_log: str | PathLike[str]) -> PhillyConsistency:
    listed = dict(zip(m["machine"], m["gpus"].astype(int)))
    names: dict[str, set[str]] = {}
    log = read_json(Path(job_log), "JSON job log", ClusterFileError)
    for job in log if isinstance(log, list) else []:
        for att in (job.get("attempts") or []) if isinstance(job, dict) else []:
            for d in (att.get("detail") or []) if isinstance(att, dict) else []:
                if isinstance(d, dict) and isinstance(d.get("ip"), str):
                    gpus = d.get("gpus") if isinstance(d.get("gpus"), list) else []
                    names.setdefault(d["ip"], set()).update(str(g) for g in gpus)
    used = {k: len(v) for k, v in sorted(names.items())}
    mems = Counter(float(x) for x in m["mem"])
    common = min(mems, key=lambda x: (-mems[x], x)) if mems else None
    return PhillyConsistency(
        machines_listed=len(listed), machines_used=len(used),
        fewer_gpus_than_used={k: (int(listed[k]), n) for k, n in used.items() if k in listed and n > listed[k]},
        used_not_listed=sorted(k for k in used if k not in listed),
        used_gpus=used, unlisted_gpu_mem_gib=common,
    )

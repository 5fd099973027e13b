"""Microsoft ITP GPU-cluster jobs (ElasticFlow raw traces).

Source: ``microsoft/elasticflow-traces`` ``data/raw-traces.tar.gz`` (MIT; Gu et al., ASPLOS'23):
ten clusters, ``cluster01.csv`` .. ``cluster10.csv``, 69,351 jobs, 2021-03-04 .. 2021-05-03.
Columns: ``job_id`` (UUID), ``submission_time`` (s from the start of collection),
``duration`` (s), ``num_gpu``.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from ._errors import UnknownVirtualClusterError
from ._options import TraceOptions
from ._source import RawTrace, SourceFile, read_csv_text, read_file, zero_duration_rule

__all__ = ["read_msitp"]

_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
_CLUSTER_RE = re.compile(r"^(cluster\d+)\.csv$")


_Found = tuple[list[SourceFile], list[str], dict[str, str]]


def _tar_sources(path: Path, wanted: tuple[str, ...] | None) -> _Found:
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        members = {
            m.group(1): info
            for info in tf.getmembers()
            if info.isfile() and (m := _CLUSTER_RE.match(Path(info.name).name))
        }
        names = sorted(members)
        chosen = [n for n in names if wanted is None or n in wanted]
        out = []
        for n in chosen:
            f = tf.extractfile(members[n])
            assert f is not None
            body = f.read()
            out.append(
                SourceFile(n, f"{path}[{members[n].name}]", body, hashlib.sha256(body).hexdigest())
            )
    return out, names, {path.name: sha}


def _find_sources(path: Path, wanted: tuple[str, ...] | None) -> _Found:
    """The cluster files to read, all cluster names available, and the {file: sha256} read."""
    if path.is_dir():
        files = {m.group(1): p for p in path.iterdir() if (m := _CLUSTER_RE.match(p.name))}
        if not files and (path / "raw").is_dir():
            return _find_sources(path / "raw", wanted)
        if not files:
            raise FileNotFoundError(f"ms-itp: no clusterNN.csv files in folder {path}")
        names = sorted(files)
        chosen = [read_file(files[n]) for n in names if wanted is None or n in wanted]
        chosen = [SourceFile(Path(s.name).stem, s.display, s.data, s.sha256) for s in chosen]
        return chosen, names, {f"{s.name}.csv": s.sha256 for s in chosen}
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return _tar_sources(path, wanted)
    src = read_file(path)
    name = path.stem
    return [SourceFile(name, src.display, src.data, src.sha256)], [name], {path.name: src.sha256}


def read_msitp(path: str | PathLike[str], options: TraceOptions) -> RawTrace:
    """Read ITP jobs from a folder of ``clusterNN.csv``, one such CSV, or the tarball.

    ``job_id`` is ``"<cluster>-<job_id>"`` (e.g. ``"cluster04-6b2d9ccc-..."``, the cluster being
    the file stem), whichever clusters are selected. Clusters not selected by
    ``options.virtual_cluster`` are not read at all. Time origin: the start of collection
    (``submission_time == 0``), shared by all clusters. ``num_gpu == 0`` rows are dropped as
    ``zero_gpu``; ``duration == 0`` rows are kept and flagged ``zero_duration`` (dropped with
    ``options.drop_zero_duration``).

    Raises:
        FileNotFoundError: if ``path`` is missing or a folder without ``clusterNN.csv``.
        TraceFormatError: on a bad row (unless ``options.skip_bad_rows``).
        UnknownVirtualClusterError: (a ``ValueError``) ``options.virtual_cluster`` names a cluster
            that is not there.
    """
    path = Path(path)
    wanted = options.virtual_cluster
    sources, names, files = _find_sources(path, wanted)
    if wanted is not None:
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise UnknownVirtualClusterError(f"ms-itp: unknown virtual cluster(s) {unknown}; {path} has {names}")
    frames = []
    rows_read = skipped = 0
    for src in sources:
        text, chk = read_csv_text(src, _COLUMNS, options.skip_bad_rows)
        ids = chk.text(text["job_id"], "job_id", unique=True)
        submit = chk.number(text["submission_time"], "submission_time")
        duration = chk.number(text["duration"], "duration")
        gpus = chk.number(text["num_gpu"], "num_gpu", integer=True)
        ok = chk.finish()
        rows_read += len(text) + chk.extra_skipped
        skipped += chk.skipped
        frames.append(
            pd.DataFrame(
                {
                    "job_id": np.char.add(f"{src.name}-", ids[ok].astype(str)).astype(object),
                    "submit_s": submit[ok],
                    "duration": duration[ok],
                    "num_gpus": gpus[ok].astype(np.int64),
                    "gpu_milli": np.full(int(ok.sum()), np.nan),
                    "cluster": np.full(int(ok.sum()), src.name, dtype=object),
                }
            )
        )
    jobs = pd.concat(frames, ignore_index=True)
    raw = RawTrace(jobs, rows_read, skipped, files, origin="the start of collection (submission_time 0)")
    raw.drop(raw.jobs["num_gpus"].to_numpy() == 0, "zero_gpu")
    zero_duration_rule(raw, options.drop_zero_duration)
    return raw

"""The real registry entries, copied from the local data mirror and checked against SOURCES.md."""

from __future__ import annotations

import hashlib
import pytest
from datasets_support import ORIGINAL_MIRROR

from iadeep.datasets import fetch, verify

# sha256 from shared/data/SOURCES.md.
SOURCES_SHA256 = {
    ("philly", "philly.csv"): "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da",
    ("gavel-throughputs", "simulation_throughputs.json"): (
        "17111f7295f03265fd9e5118d7eba31e3dd9d6e50a2e215c13ad3d3f91f74381"
    ),
    ("ms-itp", "raw-traces.tar.gz"): "67398e1a89245c50ae0881bf997e6cda0c95f9f47980af5bc56d67998965669f",
}


@pytest.fixture
def mirror() -> str:
    """The mirror the run was given ($IADEEP_DATASET_MIRROR), else the upstream hosts (``""``)."""
    return ORIGINAL_MIRROR


def test_fetch_real_datasets_from_mirror(mirror: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IADEEP_DATASET_MIRROR", mirror)
    for (dataset, name), expected in SOURCES_SHA256.items():
        path = fetch(dataset, progress=False) / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == expected
    itp = fetch("ms-itp", progress=False) / "raw-traces"
    expected = ["LICENSE"] + [f"cluster{i:02d}.csv" for i in range(1, 11)]
    assert sorted(p.name for p in itp.iterdir() if not p.name.startswith(".")) == expected
    assert (itp / "cluster01.csv").read_text().startswith("job_id,submission_time,duration,num_gpu")
    assert all(r.ok for r in verify())
    assert {r.dataset for r in verify()} == {d for d, _ in SOURCES_SHA256}

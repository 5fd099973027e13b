"""fetch / verify / dataset_dir against a real HTTP server on 127.0.0.1 and a local mirror folder."""

from __future__ import annotations

import gzip
import os
import socket
from pathlib import Path

import pytest
from datasets_support import FAST, Entry, FakeServer, payload, sha256, write_manifest

from iadeep.datasets import DatasetError, DownloadPolicy, VerifyStatus, dataset_dir, fetch, list_datasets, verify

DATA = payload(200_000, seed=1)
PATH = "/up/data.bin"


@pytest.fixture
def manifest(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One dataset 'toy' with one file data.bin served (when routed) at PATH; set as the env manifest."""
    entry = Entry("data.bin", server.base_url + PATH, DATA)
    path = write_manifest(tmp_path / "registry.toml", {"toy": [entry]})
    monkeypatch.setenv("IADEEP_DATASET_MANIFEST", str(path))
    return path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_good_download_then_cached(server: FakeServer, manifest: Path, isolated_env: Path) -> None:
    server.add(PATH, DATA)
    folder = fetch("toy", progress=False, policy=FAST)
    assert folder == isolated_env / "datasets" / "toy" == dataset_dir("toy")
    assert (folder / "data.bin").read_bytes() == DATA
    assert not (folder / "data.bin.part").exists()
    assert len(server.hits(PATH)) == 1

    assert fetch("toy", progress=False, policy=FAST) == folder  # verified by stamp: no request
    assert len(server.hits(PATH)) == 1
    [result] = verify("toy")
    assert result.ok and result.actual_sha256 == sha256(DATA) and result.actual_size == len(DATA)


def test_corrupted_cache_file_is_detected_and_replaced(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA)
    target = fetch("toy", progress=False, policy=FAST) / "data.bin"
    target.write_bytes(b"x" * len(DATA))  # same size, new mtime: the stamp no longer applies
    os.utime(target, ns=(1, 1))
    [result] = verify("toy")
    assert result.status is VerifyStatus.CHECKSUM_MISMATCH and sha256(DATA) in result.detail
    assert len(server.hits(PATH)) == 1  # verify never downloads
    fetch("toy", progress=False, policy=FAST)
    assert target.read_bytes() == DATA
    assert len(server.hits(PATH)) == 2


def test_checksum_mismatch_names_both_and_leaves_nothing(server: FakeServer, manifest: Path) -> None:
    bad = payload(len(DATA), seed=2)
    server.add(PATH, bad)
    with pytest.raises(DatasetError) as info:
        fetch("toy", progress=False, policy=FAST)
    message = str(info.value)
    assert "checksum mismatch" in message and sha256(DATA) in message and sha256(bad) in message
    assert "'toy'" in message and "data.bin" in message and server.base_url + PATH in message
    assert _leftovers(dataset_dir("toy")) == []


def test_http_404_names_status_and_url(server: FakeServer, manifest: Path) -> None:
    with pytest.raises(DatasetError) as info:
        fetch("toy", progress=False, policy=FAST)
    assert "HTTP 404" in str(info.value) and server.base_url + PATH in str(info.value)
    assert len(server.hits(PATH)) == 1  # a 4xx is not retried


def test_truncated_every_time(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, ranges=False, truncate_at=50_000)
    with pytest.raises(DatasetError) as info:
        fetch("toy", progress=False, policy=FAST)
    assert f"truncated (expected {len(DATA)} bytes, got 50000)" in str(info.value)
    # the first answer adds 50000 bytes; each restart from 0 adds none past them
    assert len(server.hits(PATH)) == 1 + FAST.attempts
    assert not (dataset_dir("toy") / "data.bin").exists()


def test_short_but_complete_response_is_truncation(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA[:1000])
    with pytest.raises(DatasetError, match=rf"truncated \(expected {len(DATA)} bytes, got 1000\)"):
        fetch("toy", progress=False, policy=FAST)
    assert _leftovers(dataset_dir("toy")) == []


def test_larger_response_is_rejected(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA + b"extra")
    with pytest.raises(DatasetError, match="larger than expected"):
        fetch("toy", progress=False, policy=FAST)
    assert _leftovers(dataset_dir("toy")) == []


def test_interrupted_download_resumes_with_range(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1)
    folder = fetch("toy", progress=False, policy=FAST)
    assert (folder / "data.bin").read_bytes() == DATA
    first, second = server.hits(PATH)
    assert "range" not in first and second["range"] == "bytes=70000-"


def test_resume_from_existing_part(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA)
    part = dataset_dir("toy") / "data.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:12_345])
    folder = fetch("toy", progress=False, policy=FAST)
    assert [h.get("range") for h in server.hits(PATH)] == ["bytes=12345-"]
    assert (folder / "data.bin").read_bytes() == DATA
    assert verify("toy")[0].ok and not part.exists()


def test_resume_restarts_when_server_ignores_range(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, ranges=False)
    part = dataset_dir("toy") / "data.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage" * 100)
    folder = fetch("toy", progress=False, policy=FAST)
    assert server.hits(PATH)[0]["range"] == "bytes=700-"
    assert (folder / "data.bin").read_bytes() == DATA


def test_complete_part_answered_416_is_accepted(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA)
    part = dataset_dir("toy") / "data.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA)
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA


def test_corrupt_part_is_discarded_then_next_fetch_succeeds(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA)
    part = dataset_dir("toy") / "data.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"\0" * 1000)
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fetch("toy", progress=False, policy=FAST)
    assert not part.exists()
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA


def test_retry_on_500_then_ok(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, fail_times=2)
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert len(server.hits(PATH)) == 3


def test_500_until_attempts_run_out(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, fail_times=10)
    with pytest.raises(DatasetError, match=r"HTTP 500 .*after 3 attempt"):
        fetch("toy", progress=False, policy=FAST)
    assert len(server.hits(PATH)) == 3


def test_connection_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.bin"
    manifest = write_manifest(tmp_path / "m.toml", {"toy": [Entry("x.bin", url, b"abc")]})
    with pytest.raises(DatasetError, match="download failed after 3 attempt") as info:
        fetch("toy", progress=False, policy=FAST, manifest=manifest)
    assert url in str(info.value)


def test_unknown_dataset_lists_known_names(manifest: Path) -> None:
    for call in (lambda: fetch("nope", progress=False), lambda: dataset_dir("nope"), lambda: verify("nope")):
        with pytest.raises(DatasetError, match=r"unknown dataset 'nope'; known datasets: toy"):
            call()


def test_verify_reports_missing_and_skips_uncached(manifest: Path) -> None:
    assert verify() == []  # nothing cached: nothing to check
    [result] = verify("toy")
    assert result.status is VerifyStatus.MISSING and not result.ok


def test_http_mirror_replaces_upstream(
    server: FakeServer, manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add("/mirror/toy/data.bin", DATA)
    monkeypatch.setenv("IADEEP_DATASET_MIRROR", server.base_url + "/mirror/")
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert server.hits(PATH) == []


def test_local_mirror_is_copied(tmp_path: Path, manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "toy").mkdir(parents=True)
    (mirror / "toy" / "data.bin").write_bytes(DATA)
    monkeypatch.setenv("IADEEP_DATASET_MIRROR", str(mirror))
    target = fetch("toy", progress=False) / "data.bin"
    assert target.read_bytes() == DATA and not target.is_symlink()


def test_missing_mirror_file(tmp_path: Path, manifest: Path) -> None:
    mirror = tmp_path / "empty-mirror"
    with pytest.raises(DatasetError) as info:
        fetch("toy", progress=False, mirror=mirror)
    assert "missing mirror file" in str(info.value) and str(mirror / "toy" / "data.bin") in str(info.value)


def test_explicit_arguments_override_env(tmp_path: Path, server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA)
    elsewhere = tmp_path / "other-cache"
    folder = fetch("toy", progress=False, policy=FAST, cache_dir=elsewhere, mirror="")
    assert folder == elsewhere / "datasets" / "toy"
    assert [d.name for d in list_datasets(manifest=manifest)] == ["toy"]


# --- HTTP semantics of content codings and range requests (RFC 9110 sections 8.4, 13.1.5, 14) ---

GZ = gzip.compress(payload(150_000, seed=3), mtime=0)  # a real .tar.gz-like body


@pytest.fixture
def gz_manifest(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Dataset 'toy' with one archive raw.tar.gz (the gzip bytes GZ) served at /up/raw.tar.gz."""
    entry = Entry("raw.tar.gz", server.base_url + "/up/raw.tar.gz", GZ)
    path = write_manifest(tmp_path / "registry.toml", {"toy": [entry]})
    monkeypatch.setenv("IADEEP_DATASET_MANIFEST", str(path))
    return path


def test_archive_labelled_content_encoding_gzip_is_stored_as_sent(server: FakeServer, gz_manifest: Path) -> None:
    server.add("/up/raw.tar.gz", GZ, headers={"Content-Encoding": "gzip", "Content-Type": "application/gzip"})
    target = fetch("toy", progress=False, policy=FAST) / "raw.tar.gz"
    assert target.read_bytes() == GZ  # not the decoded payload
    assert server.hits("/up/raw.tar.gz")[0]["accept-encoding"] == "identity"


def test_gzip_labelled_download_resumes_with_the_same_coding_and_if_range(
    server: FakeServer, gz_manifest: Path
) -> None:
    server.add(
        "/up/raw.tar.gz", GZ, headers={"Content-Encoding": "gzip"}, truncate_at=40_000, truncate_times=1,
        etags=['"v1"'],
    )
    assert (fetch("toy", progress=False, policy=FAST) / "raw.tar.gz").read_bytes() == GZ
    first, second = server.hits("/up/raw.tar.gz")
    assert "range" not in first
    assert second["range"] == "bytes=40000-" and second["if-range"] == '"v1"'


def test_changed_file_answers_if_range_with_everything(server: FakeServer, manifest: Path) -> None:
    # The first answer (ETag v1) breaks off; the server's file is then ETag v2, so the resumed
    # request's If-Range fails and the server sends all of it with 200: nothing is spliced.
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1, etags=['"v1"', '"v2"'])
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    first, second = server.hits(PATH)
    assert second["if-range"] == '"v1"' and len(server.hits(PATH)) == 2


def test_weak_etag_is_never_sent_in_if_range(server: FakeServer, manifest: Path) -> None:
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1, etags=['W/"weak"'])
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert "if-range" not in server.hits(PATH)[1]


def test_last_modified_is_the_if_range_validator_without_a_strong_etag(
    server: FakeServer, manifest: Path
) -> None:
    date = "Tue, 01 Sep 2020 00:00:00 GMT"
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1, headers={"Last-Modified": date})
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert server.hits(PATH)[1]["if-range"] == date


@pytest.mark.parametrize(
    ("route", "why"),
    [
        ({"partial_headers": {}}, "content coding 'identity', the partial file 'gzip'"),
        ({"partial": "multipart"}, "multipart/byteranges"),
        ({"partial": "wrong-start"}, "206 starts at byte 40001, not at 40000"),
        ({"partial": "wrong-total"}, f"206 says the file has {len(GZ) + 1} bytes"),
    ],
    ids=["other-coding", "multipart", "wrong-start", "wrong-total"],
)
def test_a_206_that_does_not_continue_the_part_restarts_the_download(
    server: FakeServer, gz_manifest: Path, route: dict[str, object], why: str
) -> None:
    path = "/up/raw.tar.gz"
    server.add(path, GZ, headers={"Content-Encoding": "gzip"}, truncate_at=40_000, truncate_times=1, **route)
    assert (fetch("toy", progress=False, policy=FAST) / "raw.tar.gz").read_bytes() == GZ
    ranges = [h.get("range") for h in server.hits(path)]
    assert ranges == [None, "bytes=40000-", None]  # the bad 206 is discarded, the restart is whole

    # With one failure allowed the refusal is the error, and says why.
    server.add(path, GZ, headers={"Content-Encoding": "gzip"}, truncate_at=40_000, truncate_times=1, **route)
    dataset_dir("toy").joinpath("raw.tar.gz").unlink()
    with pytest.raises(DatasetError, match="server does not honour byte ranges") as info:
        fetch("toy", progress=False, policy=DownloadPolicy(attempts=1, initial_wait_s=0, max_wait_s=0, timeout_s=5))
    assert why in str(info.value)
    assert not (dataset_dir("toy") / "raw.tar.gz.part").exists()


def test_a_fetch_that_got_nothing_leaves_no_folder_for_verify(server: FakeServer, manifest: Path) -> None:
    """A failed first fetch leaves no empty dataset folder, which ``verify`` (every cached
    dataset) would report as missing files forever, exit 1."""
    with pytest.raises(DatasetError):
        fetch("toy", progress=False, policy=FAST)  # nothing served: HTTP 404
    assert not dataset_dir("toy").exists()
    assert verify() == []


# --- a mirror that sends the file in parts: resumed while each answer adds bytes ---


def test_short_206_answers_are_resumed_until_the_file_is_whole(server: FakeServer, manifest: Path) -> None:
    # the first answer closes after 50000 bytes; every range is answered with a correct 206 for
    # at most 30000 bytes, less than the rest: five more requests, far more than FAST's 3 attempts
    server.add(PATH, DATA, truncate_at=50_000, truncate_times=1, partial_bytes=30_000)
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    ranges = [h.get("range") for h in server.hits(PATH)]
    assert ranges == [None] + [f"bytes={n}-" for n in range(50_000, 200_000, 30_000)]
    assert verify("toy")[0].ok


def test_answers_that_each_close_early_are_resumed_until_the_file_is_whole(
    server: FakeServer, manifest: Path
) -> None:
    # every answer, 200 and 206 alike, announces the rest of the file and closes after 30000 bytes
    server.add(PATH, DATA, truncate_at=30_000)
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert len(server.hits(PATH)) == 7  # ceil(200000 / 30000)


def test_a_mirror_that_stops_adding_bytes_is_one_line_naming_url_and_bytes(
    server: FakeServer, manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("tenacity.nap.time.sleep", slept.append)
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1, partial_bytes=20_000, partial_truncate_at=0)
    policy = DownloadPolicy(attempts=3, initial_wait_s=0.5, max_wait_s=0.75, timeout_s=5)
    with pytest.raises(DatasetError) as info:
        fetch("toy", progress=False, policy=policy)
    message = str(info.value)
    assert "\n" not in message and server.base_url + PATH in message
    assert f"truncated (expected {len(DATA)} bytes, got 70000) after 3 attempt(s) in a row" in message
    assert len(server.hits(PATH)) == 1 + 3 and slept == [0.0, 0.5, 0.75]  # no wait after progress
    # nothing under the file's name, verify says missing; the part stays for the next fetch
    assert verify("toy")[0].status is VerifyStatus.MISSING
    part = dataset_dir("toy") / "data.bin.part"
    assert part.read_bytes() == DATA[:70_000]

    server.add(PATH, DATA, partial_bytes=100_000)  # the mirror recovers
    assert (fetch("toy", progress=False, policy=FAST) / "data.bin").read_bytes() == DATA
    assert [h.get("range") for h in server.hits(PATH)][-2:] == ["bytes=70000-", "bytes=170000-"]
    assert not part.exists()


def test_parts_from_a_mirror_that_sends_other_bytes_fail_the_checksum(server: FakeServer, manifest: Path) -> None:
    other = payload(len(DATA), seed=9)
    server.add(PATH, other, truncate_at=50_000, truncate_times=1, partial_bytes=60_000)
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fetch("toy", progress=False, policy=FAST)
    assert _leftovers(dataset_dir("toy")) == []


def test_cli_reports_a_stalled_mirror_in_one_line(
    server: FakeServer, manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from iadeep.datasets._cli import app

    monkeypatch.setattr("tenacity.nap.time.sleep", lambda _s: None)  # the default policy's waits
    monkeypatch.setenv("COLUMNS", "80")
    server.add(PATH, DATA, truncate_at=70_000, truncate_times=1, partial_truncate_at=0)
    result = CliRunner().invoke(app, ["fetch", "toy", "--no-progress"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: ") and server.base_url + PATH in line and "got 70000" in line
    assert len(server.hits(PATH)) == 1 + DownloadPolicy().attempts

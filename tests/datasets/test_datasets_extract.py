"""Archive unpacking: into <stem>/, atomically, refusing members that would escape."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from datasets_support import Entry, FakeServer, write_manifest

from iadeep.datasets import DatasetError, fetch
from iadeep.datasets._extract import extract_archive


def make_tar(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_fetch_extracts_archive_into_stem_folder(server: FakeServer, tmp_path: Path) -> None:
    archive = make_tar([("cluster01.csv", b"job_id,t\n1,2\n"), ("LICENSE", b"MIT\n"), ("sub/x.txt", b"x")])
    server.add("/traces.tar.gz", archive)
    entry = Entry("traces.tar.gz", server.base_url + "/traces.tar.gz", archive, extract=True)
    manifest = write_manifest(tmp_path / "m.toml", {"tr": [entry]})
    folder = fetch("tr", progress=False, manifest=manifest)
    assert (folder / "traces" / "cluster01.csv").read_bytes() == b"job_id,t\n1,2\n"
    assert (folder / "traces" / "sub" / "x.txt").read_bytes() == b"x"
    assert (folder / "traces.tar.gz").read_bytes() == archive
    hidden = sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
    assert hidden == [".traces.tar.gz.verified"]  # no .part, no temporary extraction folder


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (("../evil.txt", b"pwned"), "'..'"),
        (("ok/../../evil.txt", b"pwned"), "'..'"),
        (("/tmp/evil.txt", b"pwned"), "absolute path"),
        (link("innocent", "/etc/passwd"), "link pointing outside"),
        (link("innocent", "../../evil.txt"), "link pointing outside"),
        (link("hard", "/etc/passwd", tarfile.LNKTYPE), "link pointing outside"),
        (link("dev", "", tarfile.CHRTYPE), "special file"),
    ],
)
def test_malicious_member_is_rejected(
    tmp_path: Path, member: tarfile.TarInfo | tuple[str, bytes], reason: str
) -> None:
    archive = tmp_path / "ds" / "bad.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(make_tar([("good.csv", b"a,b\n"), member]))
    with pytest.raises(DatasetError, match="unsafe archive member") as info:
        extract_archive(archive, archive.parent / "bad", dataset="ds")
    assert reason in str(info.value) and "'ds'" in str(info.value)
    assert sorted(p.name for p in archive.parent.iterdir()) == ["bad.tar.gz"]  # no target, no temp dir
    assert not (tmp_path / "evil.txt").exists()


def test_malicious_archive_through_fetch(server: FakeServer, tmp_path: Path) -> None:
    archive = make_tar([("../evil.txt", b"pwned")])
    server.add("/bad.tar.gz", archive)
    entry = Entry("bad.tar.gz", server.base_url + "/bad.tar.gz", archive, extract=True)
    manifest = write_manifest(tmp_path / "m.toml", {"bad": [entry]})
    with pytest.raises(DatasetError, match=r"unsafe archive member '\.\./evil\.txt'"):
        fetch("bad", progress=False, manifest=manifest)


def test_corrupt_archive_is_a_dataset_error(tmp_path: Path) -> None:
    archive = tmp_path / "broken.tar.gz"
    archive.write_bytes(b"not a tarball at all")
    with pytest.raises(DatasetError, match="extraction failed"):
        extract_archive(archive, tmp_path / "broken", dataset="ds")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.tar.gz"]


def test_an_intact_target_is_kept_and_an_unlisted_one_unpacked_again(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(make_tar([("new.txt", b"new")]))
    extract_archive(archive, tmp_path / "a", dataset="ds")
    (tmp_path / "a" / "mine.txt").write_text("kept")  # not from the archive: no reason to unpack again
    extract_archive(archive, tmp_path / "a", dataset="ds")
    assert (tmp_path / "a" / "mine.txt").read_text() == "kept"
    (tmp_path / "b").mkdir()  # a folder with no list of what was unpacked into it: unpacked again
    extract_archive(archive, tmp_path / "b", dataset="ds")
    assert (tmp_path / "b" / "new.txt").read_bytes() == b"new"


def make_zip(members: list[tuple[str, bytes] | zipfile.ZipInfo]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for member in members:
            if isinstance(member, zipfile.ZipInfo):
                zf.writestr(member, b"/etc/passwd")
            else:
                zf.writestr(*member)
    return buffer.getvalue()


def test_zip_archive_through_fetch(server: FakeServer, tmp_path: Path) -> None:
    archive = make_zip([("ml-1m/ratings.dat", b"1::2::3::4\n"), ("ml-1m/README", b"x")])
    server.add("/ml.zip", archive)
    entry = Entry("ml.zip", server.base_url + "/ml.zip", archive, extract=True)
    folder = fetch("ml", progress=False, manifest=write_manifest(tmp_path / "m.toml", {"ml": [entry]}))
    assert (folder / "ml" / "ml-1m" / "ratings.dat").read_bytes() == b"1::2::3::4\n"


def _zip_link(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(
    ("member", "reason"),
    [(("../evil.txt", b"pwned"), "'..'"), (("/tmp/evil.txt", b"pwned"), "absolute path"), (_zip_link("link"), "symbolic link")],
)
def test_malicious_zip_member_is_rejected(tmp_path: Path, member, reason: str) -> None:
    archive = tmp_path / "ds" / "bad.zip"
    archive.parent.mkdir()
    archive.write_bytes(make_zip([("good.csv", b"a,b\n"), member]))
    with pytest.raises(DatasetError, match="unsafe archive member") as info:
        extract_archive(archive, archive.parent / "bad", dataset="ds")
    assert reason in str(info.value)
    assert sorted(p.name for p in archive.parent.iterdir()) == ["bad.zip"]
    assert not (tmp_path / "evil.txt").exists()


def test_unpacked_files_damaged_since_are_reported_and_unpacked_again(server: FakeServer, tmp_path: Path) -> None:
    """The archive's checksum covers the archive only: a file unpacked from it and truncated or
    deleted later went unnoticed (``verify`` said ok, a trace loader read 181 of 500 jobs). The
    unpacked sizes are listed at extraction; ``verify`` reports a difference, ``fetch`` unpacks again."""
    from iadeep.datasets import VerifyStatus, verify

    archive = make_tar([("cluster01.csv", b"job_id,t\n1,2\n3,4\n"), ("cluster02.csv", b"job_id,t\n5,6\n")])
    server.add("/traces.tar.gz", archive)
    entry = Entry("traces.tar.gz", server.base_url + "/traces.tar.gz", archive, extract=True)
    manifest = write_manifest(tmp_path / "m.toml", {"tr": [entry]})
    folder = fetch("tr", progress=False, manifest=manifest)
    assert [r.status for r in verify("tr", manifest=manifest)] == [VerifyStatus.OK]
    (folder / "traces" / "cluster01.csv").write_bytes(b"job_id,t\n1,")  # truncated
    [r] = verify("tr", manifest=manifest)
    assert r.status is VerifyStatus.UNPACKED_DAMAGED and "cluster01.csv has 11 bytes, 17 when unpacked" in r.detail
    (folder / "traces" / "cluster02.csv").unlink()
    fetch("tr", progress=False, manifest=manifest)
    assert (folder / "traces" / "cluster01.csv").read_bytes() == b"job_id,t\n1,2\n3,4\n"
    assert (folder / "traces" / "cluster02.csv").read_bytes() == b"job_id,t\n5,6\n"
    assert [r.status for r in verify("tr", manifest=manifest)] == [VerifyStatus.OK]

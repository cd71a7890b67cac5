"""`build --export` / `--import`: the cache entries of a build carried to another machine, and nothing else."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from dra_conformance.backends.build_archive import export_binaries, import_binaries
from dra_conformance.errors import UsageError


def _built(cache: Path) -> dict[str, Path]:
    binaries = {
        "kube-apiserver": cache / "bin" / "kube-v1.37.2-772f2622bdc9" / "kube-apiserver",
        "kube-scheduler": cache / "bin" / "kube-v1.37.2-772f2622bdc9" / "kube-scheduler",
        "etcd": cache / "bin" / "etcd-v3.6.16-ab3a93bcab3c" / "etcd",
    }
    for name, path in binaries.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\necho {name}\n")
        path.chmod(0o755)
    return binaries


def test_the_entries_of_a_build_come_back_whole_in_another_cache(tmp_path: Path) -> None:
    binaries = _built(tmp_path / "runner-1")
    (tmp_path / "runner-1" / "bin" / "metrics_server-v0.9.0-6932f281cae1").mkdir()  # built before, not by this build
    archive = tmp_path / "build.tar.gz"

    assert export_binaries(tmp_path / "runner-1", binaries, archive) == 2
    entries = import_binaries(tmp_path / "runner-2", archive)

    assert entries == ["etcd-v3.6.16-ab3a93bcab3c", "kube-v1.37.2-772f2622bdc9"], entries
    for path in binaries.values():
        copy = tmp_path / "runner-2" / path.relative_to(tmp_path / "runner-1")
        assert copy.read_text() == path.read_text() and copy.stat().st_mode & 0o111, copy


def test_a_member_leading_out_of_the_cache_refuses_the_archive_before_writing(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("kube-v1-abc/kube-apiserver", "../../escaped"):
            data = b"x"
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(UsageError, match="leads outside the build cache"):
        import_binaries(tmp_path / "cache", archive)
    assert not (tmp_path / "cache").exists(), list((tmp_path / "cache").rglob("*"))
    assert not (tmp_path / "escaped").exists()


def test_a_binary_outside_the_cache_is_not_exported(tmp_path: Path) -> None:
    elsewhere = tmp_path / "usr" / "bin" / "kubelet"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("")
    with pytest.raises(UsageError, match="is not in the build cache"):
        export_binaries(tmp_path / "cache", {"kubelet": elsewhere}, tmp_path / "out.tar.gz")


def test_an_archive_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_text("not a tarball")
    with pytest.raises(UsageError, match="cannot import"):
        import_binaries(tmp_path / "cache", bogus)

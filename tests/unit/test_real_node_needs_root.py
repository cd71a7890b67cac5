"""`--real-node` without root is one line naming root, before anything is built or started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.errors import UsageError

NOT_ROOT = 1000


def test_a_real_node_without_root_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: NOT_ROOT)
    backend = LocalBackend(
        LocalClusterConfig(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", real_node=True)
    )
    with pytest.raises(UsageError) as refused:
        backend.start()
    assert str(refused.value).startswith(f"--real-node needs root (uid {NOT_ROOT})"), str(refused.value)
    assert not (tmp_path / "cache").exists(), "something was built"
    assert not (tmp_path / "state").exists(), "the cluster's state directory was made"


def test_cluster_up_with_a_real_node_without_root_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: NOT_ROOT)
    code = main(["cluster", "up", "--real-node", "--state-dir", str(tmp_path / "state"), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and len(err.splitlines()) == 1 and "--real-node needs root" in err, f"{code}: {err}"

"""The real node's guardrails on the standard directories it writes into (/var/lib/kubelet, /var/run/cdi).

The node's kubelet root is the host's /var/lib/kubelet: where that directory existed, `HostRecord` notes what was
in it, and teardown removes everything else (and nothing of what was there). Here on a directory of the test's own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_conformance.backends.local import real_node_host
from dra_conformance.backends.local.real_node_host import (
    HostRecord,
    new_entries,
    other_kubelet_state,
    remove_new_entries,
    snapshot,
)


def _tree(root: Path) -> None:
    (root / "device-plugins").mkdir(parents=True)
    (root / "device-plugins" / "vendor.sock").write_text("")
    (root / "notes.txt").write_text("kept")


def test_teardown_removes_what_the_node_added_and_keeps_what_was_there(tmp_path: Path) -> None:
    root = tmp_path / "kubelet"
    _tree(root)
    before = snapshot(root)
    (root / "plugins_registry").mkdir()
    (root / "plugins_registry" / "gpu.example.com-reg.sock").write_text("")
    (root / "device-plugins" / "kubelet.sock").write_text("")
    (root / "pods" / "uid" / "volumes").mkdir(parents=True)
    os.symlink("/etc", root / "link")
    added = new_entries(root, before)
    assert sorted(p.name for p in added) == ["kubelet.sock", "link", "plugins_registry", "pods"], added
    assert remove_new_entries(root, before) == []
    assert snapshot(root) == before, snapshot(root)
    assert Path("/etc").is_dir(), "the symbolic link was followed"


def test_nothing_added_means_nothing_removed(tmp_path: Path) -> None:
    root = tmp_path / "kubelet"
    _tree(root)
    before = snapshot(root)
    assert new_entries(root, before) == [] and remove_new_entries(root, before) == []
    assert snapshot(root) == before


def test_host_record_notes_the_guarded_directories_that_exist(tmp_path: Path) -> None:
    root, absent = tmp_path / "kubelet", tmp_path / "cdi"
    _tree(root)
    record = HostRecord.take(Path("/bin/true"), guarded=(root, absent))
    assert record.entries == {str(root): ["device-plugins", "device-plugins/vendor.sock", "notes.txt"]}
    path = tmp_path / "host.json"
    record.write(path)
    assert HostRecord.read(path) == record


def test_a_record_written_before_guarded_entries_existed_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text('{"sysctls": {}, "absent_paths": [], "netns": [], "containerd_shim": "/x"}')
    record = HostRecord.read(path)
    assert record is not None and record.entries == {}


@pytest.mark.parametrize(
    ("made", "found"),
    [
        ({"device-plugins/": None}, []),  # the kubelet's fixed device-plugin dir alone: not another kubelet's state
        ({"plugins_registry/": None}, []),  # an empty directory holds nothing
        ({"plugins_registry/x-reg.sock": ""}, ["plugins_registry"]),
        ({"cpu_manager_state": "{}"}, ["cpu_manager_state"]),
        ({"pods/uid/": None, "dra_manager_state": "{}"}, ["pods", "dra_manager_state"]),
    ],
)
def test_another_kubelets_state_in_the_root_is_found(
    tmp_path: Path, made: dict[str, str | None], found: list[str]
) -> None:
    for relative, content in made.items():
        path = tmp_path / relative
        if content is None:
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    assert other_kubelet_state(tmp_path) == [str(tmp_path / name) for name in found]


def test_the_standard_directories_are_guarded_and_removed_when_they_were_absent() -> None:
    assert real_node_host.GUARDED_DIRS == (Path("/var/lib/kubelet"), Path("/var/run/cdi"), Path("/etc/cdi"))
    assert {"/var/lib/kubelet", "/var/run/cdi", "/etc/cdi"} <= set(real_node_host.FIXED_PATHS)

"""The install record: the host paths a vendor's manifests mount, noted before the install and restored after it.

Every test reads and deletes below a fake root of its own (`root`), never on the host; the cluster's state directory
sits beside it. What existed before is kept, entry for entry; what did not is gone after `restore`.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from dra_conformance import paths
from dra_conformance.backends.local import install_record, shipped
from dra_conformance.backends.local.build import RealNodeBinaries
from dra_conformance.backends.local.install_record import (
    PROTECTED_PATHS,
    InstallRecord,
    host_paths_of,
    refusal,
    restore,
    snapshot,
)
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.real_node_host import RealNode
from dra_conformance.driver.profile import load_profile
from dra_conformance.kubelet.node_agent import DEFAULT_CDI_DIRS, cdi_dirs_of

SHIPPED_PROFILE = paths.fixtures_dir() / "profiles" / "reference-driver-shipped.yaml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fake host: /etc, /var/lib/kubelet, /opt and /run (with /var/run a link to it), some with files in them."""
    host = tmp_path / "host"
    for directory in ("etc/cdi", "var/lib/kubelet", "opt", "run", "home/user"):
        (host / directory).mkdir(parents=True)
    (host / "etc" / "cdi" / "static.yaml").write_text("kept")
    (host / "home" / "user" / "notes").write_text("kept")
    (host / "var" / "run").symlink_to("../run")
    return host


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state" / "cluster"
    state.mkdir(parents=True)
    return state


def _daemonset(*host_paths: str, namespace: str | None = "drivers", name: str = "plugin") -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    volumes = [{"name": f"v{i}", "hostPath": {"path": path}} for i, path in enumerate(host_paths)]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "x"}], "volumes": [*volumes, {"name": "scratch", "emptyDir": {}}]
    }}}}  # fmt: skip


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_shipped_manifests_name_their_daemonset_and_host_paths() -> None:
    profile = load_profile(SHIPPED_PROFILE)
    assert profile.install is not None
    documents = shipped.load_manifests(profile.install.manifests)
    assert install_record.daemonsets_of(documents) == ["fake-dra/fake-dra-kubelet-plugin"]
    assert host_paths_of(documents) == ["/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"]


def test_host_paths_come_from_every_kind_of_pod_template() -> None:
    volume = [{"name": "v", "hostPath": {"path": "/opt/{}"}}]
    pod: dict[str, Any] = {"kind": "Pod", "spec": {"volumes": [{"name": "v", "hostPath": {"path": "/opt/pod"}}]}}
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "volumes": [{"name": "v", "hostPath": {"path": "/opt/cron"}}]}}}}}}  # fmt: skip
    deployment = {"kind": "Deployment", "spec": {"template": {"spec": {"volumes": volume}}}}
    odd = [{"kind": "ConfigMap", "data": {"spec": "x"}}, {"kind": "Job", "spec": {"template": None}}]
    found = host_paths_of([pod, cron, deployment, _daemonset("/opt/pod", "/opt/ds"), *odd])
    assert found == ["/opt/pod", "/opt/cron", "/opt/{}", "/opt/ds"]
    assert install_record.daemonsets_of([_daemonset(namespace=None)]) == ["default/plugin"]


def test_what_did_not_exist_is_removed_and_what_existed_is_kept(root: Path, state_dir: Path) -> None:
    documents = [
        _daemonset(
            "/var/lib/kubelet/plugins_registry",  # absent, its parent present
            "/opt/vendor/lib/",  # absent down from /opt/vendor
            "/opt/vendor/run/plugin.sock",  # a file below the same new tree
            "/etc/cdi",  # present, with a file in it
            "/var/run/vendor",  # absent, through the link /var/run -> /run
        )
    ]
    before = _tree(root)
    record = snapshot(documents, state_dir, root)
    assert record.created == ["/opt/vendor", "/var/lib/kubelet/plugins_registry", "/var/run/vendor"], record
    assert record.existed == {
        "/var/lib/kubelet/plugins_registry": False,
        "/opt/vendor/lib": False,
        "/opt/vendor/run/plugin.sock": False,
        "/etc/cdi": True,
        "/var/run/vendor": False,
    }
    assert record.refused == {}
    # What the kubelet and the driver do with them during the run.
    (root / "var/lib/kubelet/plugins_registry/gpu-reg.sock").parent.mkdir()
    (root / "var/lib/kubelet/plugins_registry/gpu-reg.sock").write_text("")
    (root / "opt/vendor/lib/deep").mkdir(parents=True)
    (root / "opt/vendor/run").mkdir()
    (root / "opt/vendor/run/plugin.sock").write_text("")
    (root / "etc/cdi/vendor.yaml").write_text("written during the run")
    (root / "run/vendor").mkdir()
    assert install_record.leftovers(record, root) == [
        "path /opt/vendor (absent before the install)",
        "path /var/lib/kubelet/plugins_registry (absent before the install)",
        "path /var/run/vendor (absent before the install)",
    ]
    assert restore(record, state_dir, root) == []
    # Only the directory that existed keeps what was added to it (real_node.HostRecord guards /etc/cdi entry by entry).
    assert _tree(root) == sorted([*before, "etc/cdi/vendor.yaml"])
    assert (root / "etc/cdi/static.yaml").read_text() == "kept"
    assert install_record.leftovers(record, root) == []
    assert restore(record, state_dir, root) == [], "restore is idempotent"


def test_nothing_is_removed_when_every_host_path_existed(root: Path, state_dir: Path) -> None:
    record = snapshot([_daemonset("/etc/cdi", "/var/lib/kubelet", "/home/user")], state_dir, root)
    assert record.created == [] and all(record.existed.values()), record
    before = _tree(root)
    assert restore(record, state_dir, root) == [] and _tree(root) == before


@pytest.mark.parametrize("path", sorted(PROTECTED_PATHS))
def test_the_hosts_top_directories_are_never_recorded(root: Path, state_dir: Path, path: str) -> None:
    record = snapshot([_daemonset(path)], state_dir, root)
    assert record.existed == {} and record.created == [], record
    assert list(record.refused) == [path], record.refused


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/var/", "top directories"),  # as /var
        ("//usr", "top directories"),
        ("/var/run", "top directories"),
        ("/dev/fuse", "kernel populates"),
        ("/sys/fs/cgroup/vendor", "kernel populates"),
        ("/proc/driver", "kernel populates"),
        ("/opt/../etc", "'..'"),
        ("var/lib/vendor", "absolute"),
        ("/state", "state directory"),  # a parent of the state dir
        ("/state/cluster", "state directory"),  # the state dir itself
    ],
)
def test_refused_paths_are_neither_recorded_nor_removed(root: Path, path: str, why: str) -> None:
    state_dir = root / "state" / "cluster"
    state_dir.mkdir(parents=True)
    record = snapshot([_daemonset(path)], state_dir, root)
    assert record.created == [] and record.existed == {}, record
    [(refused, reason)] = record.refused.items()
    assert refused in (path, str(PurePosixPath(path))) and why in reason, (refused, reason)


def test_a_missing_host_path_below_a_missing_top_directory_is_refused(tmp_path: Path, state_dir: Path) -> None:
    root = tmp_path / "bare"  # no /srv: mounting /srv/vendor would create it, and /srv is never deleted
    root.mkdir()
    record = snapshot([_daemonset("/srv/vendor")], state_dir, root)
    assert record.created == [] and "/srv is one of the host's top directories" in record.refused["/srv/vendor"]


def test_a_host_path_resolving_outside_the_root_is_refused(root: Path, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (root / "opt" / "escape").symlink_to(tmp_path / "elsewhere")
    record = snapshot([_daemonset("/opt/escape/vendor")], state_dir, root)
    assert record.created == [] and "outside" in record.refused["/opt/escape/vendor"], record


def test_restore_checks_a_record_again_and_deletes_nothing_it_refuses(root: Path, state_dir: Path) -> None:
    tampered = InstallRecord(created=["/", "/etc", "/var/run", "/home/../etc", "/dev/null", "relative"])
    before = _tree(root)
    problems = restore(tampered, state_dir, root)
    assert len(problems) == len(tampered.created), problems
    assert _tree(root) == before
    assert install_record.removable(tampered, state_dir, root) == []


def test_a_created_path_that_became_a_link_goes_but_not_what_it_points_to(
    root: Path, tmp_path: Path, state_dir: Path
) -> None:
    record = snapshot([_daemonset("/opt/vendor")], state_dir, root)
    (root / "home/user/kept").mkdir()
    (root / "opt/vendor").symlink_to(root / "home/user")
    assert restore(record, state_dir, root) == []
    assert not os.path.lexists(root / "opt/vendor")
    assert (root / "home/user/notes").read_text() == "kept" and (root / "home/user/kept").is_dir()


def test_the_record_is_taken_into_the_state_dir_and_read_back(root: Path, state_dir: Path) -> None:
    layout = ClusterLayout(state_dir)
    assert install_record.driver_daemonsets(layout) == ()
    lines: list[str] = []
    record = install_record.take(layout, [_daemonset("/opt/vendor", "/etc/cdi", "/dev")], lines.append, root)
    assert InstallRecord.read(install_record.record_path(layout)) == record
    assert install_record.driver_daemonsets(layout) == ("drivers/plugin",)
    assert lines == [
        "install: host paths the manifests mount: /opt/vendor (absent), /etc/cdi (present); removed with the "
        "cluster: /opt/vendor",
        "install: host path /dev left as the run leaves it: /dev is one of the host's top directories "
        "(PROTECTED_PATHS)",
    ]


def test_refusal_accepts_an_ordinary_path(root: Path, state_dir: Path) -> None:
    assert refusal(PurePosixPath("/opt/vendor"), root, state_dir) is None
    assert refusal(PurePosixPath("/var/run/cdi"), root, state_dir) is None


def test_the_real_nodes_containerd_reads_cdi_specs_where_containerd_does_by_default(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path / "cluster")
    binaries = RealNodeBinaries(*(tmp_path / name for name in ("kubelet", "containerd", "shim", "ctr", "runc", "p")))
    node = RealNode(layout, binaries, binaries.pause, "192.0.2.2")
    config = node._containerd_config()
    runtime = tomllib.loads(config)["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi", str(node.cdi_dir)]
    assert [str(d) for d in DEFAULT_CDI_DIRS] == runtime["cdi_spec_dirs"][:2], "containerd's own default comes first"
    assert cdi_dirs_of(config)[:2] == DEFAULT_CDI_DIRS, "what the node agent reads from a node's config"

"""The real node's files: OCI image archives containerd can import, and the kubelet and containerd configs."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from dra_conformance import versions
from dra_conformance.backends.local import images
from dra_conformance.backends.local.build import RealNodeBinaries
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.real_node_host import RealNode
from dra_conformance.kube.builders import PAUSE_IMAGE
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.model.cluster import REAL_NODE_TAINT


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_image_archive_is_an_oci_layout_whose_blobs_match_their_digests(tmp_path: Path) -> None:
    program = tmp_path / "pause"
    program.write_bytes(b"\x7fELF not really")
    digest = images.write_archive(images.pause_image(program), tmp_path / "pause.tar")
    members = _members(tmp_path / "pause.tar")
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, blob in members.items():
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(blob).hexdigest(), name
    index = json.loads(members["index.json"])
    [manifest] = index["manifests"]
    assert manifest["digest"] == digest
    assert manifest["annotations"]["io.containerd.image.name"] == PAUSE_IMAGE
    config = json.loads(_blob(members, json.loads(_blob(members, digest))["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["/pause"], config


def test_image_archive_is_the_same_for_the_same_inputs(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"static busybox stand-in")
    first = images.write_archive(images.busybox_image(busybox), tmp_path / "a.tar")
    second = images.write_archive(images.busybox_image(busybox), tmp_path / "b.tar")
    assert first == second


def _blob(members: dict[str, bytes], digest: str) -> bytes:
    return members[f"blobs/sha256/{digest.split(':')[1]}"]


def test_workload_image_links_every_applet_to_busybox(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"x")
    manifest_digest = images.write_archive(images.busybox_image(busybox), tmp_path / "b.tar")
    members = _members(tmp_path / "b.tar")
    [layer] = json.loads(_blob(members, manifest_digest))["layers"]
    with tarfile.open(fileobj=io.BytesIO(_blob(members, layer["digest"]))) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {f"bin/{applet}": "busybox" for applet in images.BUSYBOX_APPLETS}


@pytest.fixture
def node(tmp_path: Path) -> RealNode:
    layout = ClusterLayout(tmp_path / "cluster")
    layout.pki.mkdir(parents=True)
    binaries = RealNodeBinaries(*(tmp_path / name for name in ("kubelet", "containerd", "shim", "ctr", "runc", "p")))
    for path in vars(binaries).values():
        path.write_bytes(b"x")
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        pytest.skip("not applicable: no /bin/busybox (Debian busybox-static) on this machine")
    return RealNode(layout, binaries, binaries.pause, "192.0.2.2")


def test_node_configs_carry_the_settings_this_machine_needs(node: RealNode) -> None:
    authority = CertificateAuthority.create("test-ca")
    node.write_files(authority, "https://127.0.0.1:6443")
    kubelet = json.loads((node.dir / "kubelet.yaml").read_text())
    assert kubelet["failCgroupV1"] is False
    assert kubelet["readOnlyPort"] == 0 and kubelet["address"] == "192.0.2.2"
    assert kubelet["registerWithTaints"] == [REAL_NODE_TAINT]
    assert kubelet["featureGates"] == versions.FEATURE_GATES[versions.minor()]
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"
    containerd = (node.dir / "containerd.toml").read_text()
    assert "restrict_oom_score_adj = true" in containerd and "enable_cdi = true" in containerd
    assert f'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "{node.cdi_dir}"]' in containerd
    assert f'sandbox = "{PAUSE_IMAGE}"' in containerd
    assert (node.bin_dir / "containerd-shim-runc-v2").resolve() == node.binaries.containerd_shim_runc_v2.resolve()
    cni = json.loads((node.dir / "cni" / "10-dra-conformance.conflist").read_text())
    assert cni["plugins"][0]["ipMasq"] is False and cni["cniVersion"] == "1.0.0"
    assert len(str(node.containerd_socket)) < 100, "unix socket paths are limited to 107 bytes"

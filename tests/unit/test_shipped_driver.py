"""The driver as shipped: the profile form (install, nodes), the reference driver's manifests, the transforms."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import paths
from dra_conformance.backends.local import daemonset_disruption, shipped
from dra_conformance.driver.profile import NodeScope, Transforms, load_profile
from dra_conformance.errors import ProfileError
from dra_conformance.image import recipes
from dra_conformance.model.driver import DriverEndpoint
from tests.driver_flags import option_values

SHIPPED_PROFILE = paths.fixtures_dir() / "profiles" / "reference-driver-shipped.yaml"
REPO = Path(__file__).resolve().parents[2]
NODE = "real-node-0"

PROFILE = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
install:
  images: [gpu.tar]
  manifests: [chart.yaml]
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


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "chart.yaml").write_text("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: gpu, namespace: x}\n")
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def _documents() -> list[dict[str, Any]]:
    profile = load_profile(SHIPPED_PROFILE)
    assert profile.install is not None
    return shipped.load_manifests(profile.install.manifests)


def _only(kind: str) -> dict[str, Any]:
    found = [d for d in _documents() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


# --- the profile form ---------------------------------------------------------------------------------------------


def test_install_form_loads_images_and_manifests_relative_to_the_profile(tmp_path: Path) -> None:
    profile = load_profile(_write(tmp_path, PROFILE))
    assert profile.install is not None and profile.run is None
    assert profile.install.images == ((tmp_path / "gpu.tar").resolve(),)
    assert profile.install.manifests == ((tmp_path / "chart.yaml").resolve(),)
    assert profile.install.transforms == Transforms() and profile.real_nodes_only


def test_nodes_default_to_all_and_real_only_applies_to_a_run_driver_too(tmp_path: Path) -> None:
    run = PROFILE.replace("install:\n  images: [gpu.tar]\n  manifests: [chart.yaml]\n", "run: {command: [gpu]}\n")
    assert load_profile(_write(tmp_path, run)).nodes is NodeScope.REAL_ONLY
    assert load_profile(_write(tmp_path, run.replace("nodes: realOnly\n", ""))).nodes is NodeScope.ALL


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "problem"),
    [
        ("nodes: realOnly\n", "", 4, "install", "set nodes: realOnly"),
        ("nodes: realOnly\n", "nodes: realonly\n", 7, "nodes", "'realonly' is not one of ['all', 'realOnly']"),
        ("manifests: [chart.yaml]", "manifests: [missing.yaml]", 6, "install.manifests[0]", "file not found"),
        ("  manifests: [chart.yaml]\n", "  manifests: [chart.yaml]\n  transform: {pinToRealNode: true}\n", 7,
         "install.transform.pinToRealNode", "unknown key"),
        ("nodes: realOnly\n", "nodes: realOnly\nrun: {command: [gpu]}\n", 4, "install", "exclude each other"),
    ],
)  # fmt: skip
def test_install_form_problems_are_one_located_line(
    tmp_path: Path, old: str, new: str, line: int, key: str, problem: str
) -> None:
    assert PROFILE.count(old) == 1
    path = _write(tmp_path, PROFILE.replace(old, new))
    with pytest.raises(ProfileError) as rejected:
        load_profile(path)
    message = str(rejected.value)
    assert message.startswith(f"{path}:{line}: {key}:") and problem in message, message


# --- the reference driver as shipped ------------------------------------------------------------------------------


def test_shipped_profile_installs_the_reference_driver_on_real_nodes_only() -> None:
    profile = load_profile(SHIPPED_PROFILE)
    assert profile.install is not None and profile.run is None and profile.real_nodes_only
    assert profile.install.images == ((REPO / "reports" / "images" / "reference-driver.tar").resolve(),)
    assert profile.install.transforms == Transforms(pin_to_real_nodes=True, api_server_from_host=True)
    assert [c.name for c in profile.device_classes] == [_only("DeviceClass")["metadata"]["name"]]
    account = profile.identity.service_account
    kinds = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in _documents()}
    assert ("ServiceAccount", account.namespace, account.name) in kinds, kinds


def test_shipped_daemonset_runs_the_built_image_with_the_standard_paths_it_mounts() -> None:
    daemon_set = _only("DaemonSet")
    pod = daemon_set["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    image = f"{recipes.REFERENCE_DRIVER_REPOSITORY}:{recipes.REFERENCE_DRIVER_VERSION}"
    assert container["image"] == image, container["image"]
    # No shell in the image: the readiness probe is the binary's own.
    probe = container["readinessProbe"]["exec"]["command"]
    assert probe[:2] == [f"/{recipes.REFERENCE_DRIVER_FILE}", "registered"], probe
    assert container["imagePullPolicy"] in ("Never", "IfNotPresent")
    flags = option_values(container["args"])
    profile = load_profile(SHIPPED_PROFILE)
    assert (flags["driver-name"], flags["devices"]) == (profile.driver, str(profile.devices.per_node))
    assert "standard-paths" in flags, "its sockets are where the kubelet looks by default"
    endpoint = DriverEndpoint(flags["driver-name"], NODE, Path("/var/lib/kubelet"))
    host_paths = {v["name"]: Path(v["hostPath"]["path"]) for v in pod["volumes"] if "hostPath" in v}
    mounted = {Path(m["mountPath"]): host_paths[m["name"]] for m in container["volumeMounts"]}
    # Each directory the driver writes to is mounted, at the same path on the host.
    for written in (endpoint.registrar_dir, endpoint.plugins_dir, Path(flags["state-dir"]), Path(flags["cdi-dir"])):
        holders = [inside for inside in mounted if written == inside or inside in written.parents]
        assert holders and all(mounted[inside] == inside for inside in holders), (written, mounted)
    assert pod["serviceAccountName"] == profile.identity.service_account.name
    assert {"operator": "Exists"} in pod["tolerations"]


def test_shipped_admission_policy_binds_and_limits_the_plugins_slice_writes() -> None:
    policy, binding = _only("ValidatingAdmissionPolicy"), _only("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["resource.k8s.io"], ["resourceslices"])
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    account = load_profile(SHIPPED_PROFILE).identity.service_account
    (condition,) = policy["spec"]["matchConditions"]
    assert account.username in condition["expression"], condition


# --- the declared transformations ---------------------------------------------------------------------------------


def test_transforms_pin_pods_to_the_real_nodes_and_the_api_server_and_say_so() -> None:
    documents = _documents()
    before = yaml.safe_dump(documents)
    changed, lines = shipped.transform(
        documents, Transforms(pin_to_real_nodes=True, api_server_from_host=True), (NODE,), "https://127.0.0.1:6443"
    )
    assert yaml.safe_dump(documents) == before, "the vendor's documents were changed in place"
    pod = next(d for d in changed if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # On the real nodes, and off a node the suite holds the driver off (to stop it: daemonset_disruption).
    held_off = {"key": daemonset_disruption.HELD_OFF_LABEL, "operator": "DoesNotExist"}
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}, held_off]}
    ], terms
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert pod["hostNetwork"] is True
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    assert len(lines) == 2 and all(re.match(r"DaemonSet fake-dra/\S+: ", line) for line in lines), lines
    others = [d for d in changed if d["kind"] != "DaemonSet"]
    assert others == [d for d in documents if d["kind"] != "DaemonSet"], "only pod templates change"


def test_no_transform_declared_changes_nothing() -> None:
    documents = _documents()
    assert shipped.transform(documents, Transforms(), (NODE,), "https://127.0.0.1:6443") == (documents, [])


def test_pinning_is_added_to_every_existing_node_selector_term() -> None:
    pod: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]},
                    ]
                }
            }
        }
    }
    document: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": pod}},
    }
    (changed,), _ = shipped.transform([document], Transforms(pin_to_real_nodes=True), (NODE,), "https://h:1")
    terms = changed["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(t["matchExpressions"][-2]["values"] == [NODE] for t in terms), terms
    assert all(t["matchExpressions"][-1]["key"] == daemonset_disruption.HELD_OFF_LABEL for t in terms), terms


def test_namespaces_apply_first_and_the_rest_in_file_order() -> None:
    kinds = [d["kind"] for d in shipped.apply_order(_documents())]
    assert kinds[0] == "Namespace" and kinds.count("Namespace") == 1
    assert kinds[1:] == [d["kind"] for d in _documents() if d["kind"] != "Namespace"]

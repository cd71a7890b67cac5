"""The Sonobuoy plugin definition: Sonobuoy's format, the profile in its ConfigMap, the RBAC of rights.py, bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import cli, paths
from dra_conformance.driver.profile import load_profile
from dra_conformance.kube import rights
from dra_conformance.rbac import audit as rbac_audit
from dra_conformance.sonobuoy import plugin, protocol

UPSTREAM_PROFILE = paths.CHECKOUT / "fixtures" / "profiles" / "upstream-test-driver.yaml"


def _plugin(*extra: str, profile: Path = UPSTREAM_PROFILE) -> dict[str, Any]:
    settings = plugin.settings_from(profile, "lab-1", None, None, extra)
    documents = list(yaml.safe_load_all(plugin.render_plugin(settings)))
    assert len(documents) == 1, f"sonobuoy run --plugin reads one document, got {len(documents)}"
    document: dict[str, Any] = documents[0]
    return document


def _rbac(namespace: str | None = None) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(plugin.render_rbac(namespace)) if d]


def test_plugin_is_a_job_with_manual_results_running_the_entry_as_its_own_service_account() -> None:
    document = _plugin()
    config = document["sonobuoy-config"]
    assert (config["driver"], config["plugin-name"], config["result-format"]) == ("Job", "dra-conformance", "manual")
    assert config["result-files"] == [protocol.RESULTS_FILE]
    spec = document["spec"]
    assert spec["image"] == plugin.DEFAULT_IMAGE
    assert spec["command"][:3] == ["/bin/sh", "-c", plugin.FALLBACK_SCRIPT], spec["command"]
    assert plugin.FALLBACK_SCRIPT.startswith('dra-conformance sonobuoy-entry "$@";')
    assert spec["args"] == [
        "--profile",
        "/tmp/sonobuoy/config/upstream-test-driver.yaml",
        "--cluster-name",
        "lab-1",
    ]
    pod = document["podSpec"]
    assert pod["serviceAccountName"] == plugin.SERVICE_ACCOUNT, pod
    assert pod["restartPolicy"] == "Never", pod
    assert set(document) == {"sonobuoy-config", "spec", "podSpec", "config-map"}, sorted(document)


def test_run_arguments_after_the_options_reach_the_run_in_the_pod() -> None:
    spec = _plugin("-k", "protocol", "--dra-strictness=strict")["spec"]
    assert spec["args"][-3:] == ["-k", "protocol", "--dra-strictness=strict"], spec["args"]


def test_config_map_carries_the_profile_and_its_manifests_so_the_mounted_copy_loads_as_the_same_profile(
    tmp_path: Path,
) -> None:
    files = _plugin()["config-map"]
    assert sorted(files) == ["upstream-test-driver-rbac.yaml", "upstream-test-driver.yaml"], sorted(files)
    for name, content in files.items():
        assert content == (UPSTREAM_PROFILE.parent / name).read_text(), f"{name} differs from the file"
        (tmp_path / name).write_text(content)
    mounted = load_profile(tmp_path / UPSTREAM_PROFILE.name)
    original = load_profile(UPSTREAM_PROFILE)
    assert (mounted.digest, mounted.driver) == (original.digest, original.driver)
    assert [p.name for p in mounted.identity.rbac] == ["upstream-test-driver-rbac.yaml"]


def test_plugin_rbac_grants_exactly_the_rights_rights_py_declares_to_the_plugins_service_account() -> None:
    documents = _rbac("dra-nightly")
    kinds = [d["kind"] for d in documents]
    assert kinds == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"], kinds
    role, binding = documents[2], documents[3]
    granted = rbac_audit.expand(role["rules"])
    needed = {(r.group, r.rule_resource, r.verb, "*") for r in rights.needed_rights()}
    assert granted == needed, f"extra {sorted(granted - needed)}, missing {sorted(needed - granted)}"
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == plugin.CLUSTER_ROLE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": plugin.SERVICE_ACCOUNT, "namespace": "dra-nightly"}
    ]


def test_plugin_rbac_audited_like_a_drivers_grants_nothing_beyond_the_suites_rights_and_lacks_none(
    tmp_path: Path,
) -> None:
    # As suites/rbac/test_least_privilege.py audits a driver's shipped RBAC against what it needs: here what the
    # plugin ships against the rights the preflight asks for, and the shipped CI ClusterRole against the plugin's.
    # documented() narrows resourceclaims/driver rules to one driver's name; the suite's roles are for any name.
    manifest = tmp_path / "plugin-rbac.yaml"
    manifest.write_text(plugin.render_rbac())
    shipped = rbac_audit.documented([manifest], driver="*")
    needed = rbac_audit.expand(rights.cluster_role_rules(rights.needed_rights()))
    beyond = rbac_audit.excess(shipped, needed, baseline=set())
    lacking = rbac_audit.excess(needed, shipped, baseline=set())
    ci_role = rbac_audit.documented([rights.CLUSTER_ROLE_MANIFEST], driver="*")
    assert (beyond, lacking) == ([], []), f"the plugin's RBAC grants beyond rights.py {beyond}, lacks {lacking}"
    assert ci_role == shipped, f"differs from ci-clusterrole.yaml: {sorted(ci_role ^ shipped)}"


def test_plugin_rbac_holds_what_sonobuoys_worker_sidecar_needs_in_the_plugins_pod() -> None:
    # The worker reads its own pod (pkg/worker/worker.go allOtherContainersCompleted) as the pod's ServiceAccount.
    granted = rbac_audit.expand(_rbac()[2]["rules"])
    assert rbac_audit.covered(("", "pods", "get", "*"), granted)


def test_missing_profile_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["sonobuoy-plugin", "--cluster-name", "lab-1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--profile" in err, (code, err)


def test_unreadable_profile_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["sonobuoy-plugin", "--profile", str(tmp_path / "absent.yaml"), "--cluster-name", "lab-1"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "absent.yaml" in captured.err, (code, captured.err)
    assert captured.out == "", "nothing printed for a plugin that cannot be made"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--profile", str(UPSTREAM_PROFILE)], "--cluster-name"),
        (["--profile", str(UPSTREAM_PROFILE), "--cluster-name", " "], "--cluster-name"),
        (["--profile", str(UPSTREAM_PROFILE), "--cluster-name", "a", "--namespace", "Not_A_Label"], "--namespace"),
    ],
    ids=["no-cluster-name", "blank-cluster-name", "bad-namespace"],
)
def test_bad_plugin_input_is_one_line_and_exit_2(
    options: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["sonobuoy-plugin", *options])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, (code, err)


def test_profile_naming_a_manifest_outside_its_directory_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rbac").mkdir()
    (tmp_path / "rbac" / "driver.yaml").write_text(
        (UPSTREAM_PROFILE.parent / "upstream-test-driver-rbac.yaml").read_text()
    )
    profile = tmp_path / "driver.yaml"
    profile.write_text(
        UPSTREAM_PROFILE.read_text().replace("rbac: [upstream-test-driver-rbac.yaml]", "rbac: [rbac/driver.yaml]")
    )
    load_profile(profile)  # a valid profile: the refusal is the plugin's
    code = cli.main(["sonobuoy-plugin", "--profile", str(profile), "--cluster-name", "lab-1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "rbac/driver.yaml" in err, (code, err)


def _run_fallback(tmp_path: Path, fake_entry: str) -> subprocess.CompletedProcess[str]:
    """The plugin's container command with `dra-conformance` replaced by a script of the test's."""
    bin_dir, results_dir = tmp_path / "bin", tmp_path / "results"
    bin_dir.mkdir()
    results_dir.mkdir()
    (bin_dir / "dra-conformance").write_text("#!/bin/sh\n" + fake_entry)
    (bin_dir / "dra-conformance").chmod(0o755)
    command = _plugin()["spec"]["command"]
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", protocol.RESULTS_DIR_ENV: str(results_dir)}
    return subprocess.run([*command, "--profile", "p"], env=environment, capture_output=True, text=True, timeout=30)


def test_container_writes_a_failed_result_and_done_when_the_entry_dies_before_writing_any(tmp_path: Path) -> None:
    ran = _run_fallback(tmp_path, 'echo "ModuleNotFoundError: No module named prometheus_client" >&2; exit 1\n')
    results_dir = tmp_path / "results"
    assert ran.returncode == 1, "the entry's exit code stays the container's"
    listed = Path((results_dir / protocol.DONE_FILE).read_text())
    assert listed == results_dir / protocol.RESULTS_FILE, listed
    document = yaml.safe_load(listed.read_text())
    assert document["status"] == "failed" and document["items"][0]["status"] == "failed", document
    assert "exited with code 1 before writing results" in document["items"][0]["name"], document


def test_container_leaves_the_entrys_done_file_alone(tmp_path: Path) -> None:
    ran = _run_fallback(tmp_path, f'printf /x/tarball.tar.gz > "${protocol.RESULTS_DIR_ENV}/done"; exit 0\n')
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "results" / protocol.DONE_FILE).read_text() == "/x/tarball.tar.gz"
    assert not (tmp_path / "results" / protocol.RESULTS_FILE).exists()


def test_default_image_is_the_one_image_build_writes() -> None:
    recipes = pytest.importorskip("dra_conformance.image.recipes", reason="the image package is on its own branch")
    assert plugin.DEFAULT_IMAGE.rsplit(":", 1)[0] == recipes.SUITE.repository


def _generated(tmp_path: Path) -> list[dict[str, Any]]:
    """What the pinned `sonobuoy gen --plugin` writes for the plugin of UPSTREAM_PROFILE (no cluster needed)."""
    from dra_conformance.backends import registry
    from dra_conformance.config import SuiteConfig

    binary = registry.build_sonobuoy(SuiteConfig())
    plugin_file = tmp_path / "plugin.yaml"
    plugin_file.write_text(plugin.render_plugin(plugin.settings_from(UPSTREAM_PROFILE, "lab-1", None, None)))
    command = ["gen", "--plugin", str(plugin_file), "--kubernetes-version", "v1.37.2", "--kubeconfig", "/dev/null"]
    generated = subprocess.run([str(binary), *command], capture_output=True, text=True, timeout=60, check=False)
    assert generated.returncode == 0, generated.stderr
    return [d for d in yaml.safe_load_all(generated.stdout) if d]


@pytest.mark.needs_go
def test_sonobuoy_itself_accepts_the_plugin_and_mounts_its_config_map(tmp_path: Path) -> None:
    documents = _generated(tmp_path)
    config_maps = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ConfigMap"}
    assert sorted(config_maps["plugin-dra-conformance-cm"]["data"]) == sorted(_plugin()["config-map"])
    loaded = yaml.safe_load(config_maps["sonobuoy-plugins-cm"]["data"]["plugin-0.yaml"])
    mounts = {m["mountPath"]: m["name"] for m in loaded["spec"]["volumeMounts"]}
    assert mounts.get(str(protocol.CONFIG_DIR)) == "sonobuoy-dra-conformance-vol", mounts
    assert loaded["podSpec"]["serviceAccountName"] == plugin.SERVICE_ACCOUNT


def test_plugin_on_the_hosts_network_reaches_the_api_server_given_and_runs_only_on_the_nodes_named() -> None:
    settings = plugin.settings_from(
        UPSTREAM_PROFILE, "lab-1", None, None, (), api_server_from_host="https://127.0.0.1:6443", nodes=["node-a"]
    )
    document = plugin.plugin_definition(settings)
    pod, spec = document["podSpec"], document["spec"]
    assert pod.get("hostNetwork") is True, pod
    assert {e["name"]: e["value"] for e in spec["env"]} == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
    }, spec["env"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}
    ], terms
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"], pod["tolerations"]
    default = _plugin()
    assert "hostNetwork" not in default["podSpec"] and "env" not in default["spec"], default


@pytest.mark.needs_go
def test_sonobuoys_generated_aggregator_moves_to_the_hosts_network_with_its_ports_and_nothing_else(
    tmp_path: Path,
) -> None:
    from dra_conformance.sonobuoy import on_host

    documents = _generated(tmp_path)
    changed = on_host.aggregator_on_host(documents, "https://127.0.0.1:6443", ("node-a",), 28080, 28099)
    differing = [(before, after) for before, after in zip(documents, changed, strict=True) if before != after]
    assert [after["kind"] for _, after in differing] == ["ConfigMap", "Pod"], [a["kind"] for _, a in differing]
    config = json.loads(next(a for _, a in differing if a["kind"] == "ConfigMap")["data"]["config.json"])
    assert (config["Server"]["bindport"], config["ProgressUpdatesPort"]) == (28080, "28099"), config
    pod = next(a for _, a in differing if a["kind"] == "Pod")["spec"]
    assert pod["hostNetwork"] is True, pod
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443"), env
    assert "SONOBUOY_ADVERTISE_IP" in env, "the aggregator still advertises its pod IP (on the host: the node's)"


def test_a_manifest_not_of_sonobuoy_gen_is_refused_in_one_line() -> None:
    from dra_conformance.errors import UsageError
    from dra_conformance.sonobuoy import on_host

    with pytest.raises(UsageError, match="not a manifest of `sonobuoy gen`: expected one aggregator pod"):
        on_host.aggregator_on_host([{"kind": "Namespace", "metadata": {"name": "x"}}], "https://h:1", (), 1, 2)


def test_an_api_server_that_is_no_url_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["sonobuoy-plugin", "--profile", str(UPSTREAM_PROFILE), "--cluster-name", "x", "--api-server-from-host", "h"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "is no API server URL" in err, (code, err)

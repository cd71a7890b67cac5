"""The split in-cluster run: the cluster part's Job and the node part's DaemonSet, and which checks each selects."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import cli, paths
from dra_conformance.errors import UsageError
from dra_conformance.plugin import certification_hooks
from dra_conformance.sonobuoy import entry, part, plugin, protocol
from dra_conformance.sonobuoy.part import NODE_MARKER, Part

pytest_plugins = ["pytester"]

UPSTREAM_PROFILE = paths.CHECKOUT / "fixtures" / "profiles" / "upstream-test-driver.yaml"
# A sh script's wait for SIGTERM ends within this (the DaemonSet's pod is deleted when the run is done).
TERM_DEADLINE = 10.0


def _definition(selected: Part, **options: Any) -> dict[str, Any]:
    settings = plugin.settings_from(UPSTREAM_PROFILE, "lab-1", None, None, (), part=selected, **options)
    documents = list(yaml.safe_load_all(plugin.render_plugin(settings)))
    assert len(documents) == 1, f"sonobuoy run --plugin reads one document, got {len(documents)}"
    document: dict[str, Any] = documents[0]
    return document


def test_the_cluster_part_is_the_job_selecting_the_checks_that_are_not_node_level() -> None:
    document = _definition(Part.CLUSTER)
    config, spec, pod = document["sonobuoy-config"], document["spec"], document["podSpec"]
    assert (config["driver"], config["plugin-name"]) == ("Job", plugin.PLUGIN_NAME), config
    assert "order" not in config, "the cluster part runs first"
    assert spec["args"] == [
        "--profile",
        "/tmp/sonobuoy/config/upstream-test-driver.yaml",
        "--cluster-name",
        "lab-1",
        "--part",
        "cluster",
        "-p",
        "dra_conformance.sonobuoy.part",
        "-m",
        f"not {NODE_MARKER}",
    ], spec["args"]
    assert spec["command"][:3] == ["/bin/sh", "-c", plugin.FALLBACK_SCRIPT]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == plugin.SERVICE_ACCOUNT, pod


def test_the_node_part_is_a_daemonset_on_the_driver_nodes_with_the_kubelet_root_at_its_own_path() -> None:
    document = _definition(Part.NODE, nodes=["gpu-1", "gpu-2"], kubelet_root="/data/kubelet")
    config, spec, pod = document["sonobuoy-config"], document["spec"], document["podSpec"]
    assert (config["driver"], config["plugin-name"]) == ("DaemonSet", plugin.NODE_PLUGIN_NAME), config
    assert config["order"] == plugin.NODE_PART_ORDER > 0, "after the cluster part, never beside it"
    assert spec["args"][4:] == [
        "--part",
        "node",
        "--scratch-dir",
        "/data/kubelet/plugins/dra-conformance-sonobuoy",
        "-p",
        "dra_conformance.sonobuoy.part",
        "-m",
        NODE_MARKER,
    ], spec["args"]
    mounts = {m["mountPath"]: m for m in spec["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    root = mounts["/data/kubelet"]
    assert volumes[root["name"]]["hostPath"] == {"path": "/data/kubelet", "type": "Directory"}, volumes
    assert root.get("mountPropagation") == "HostToContainer" and not root.get("readOnly"), root
    for cdi in ("/etc/cdi", "/var/run/cdi"):
        assert mounts[cdi]["readOnly"] is True and volumes[mounts[cdi]["name"]]["hostPath"]["path"] == cdi
    assert pod["hostNetwork"] is True and pod["tolerations"] == [{"operator": "Exists"}], pod
    assert "restartPolicy" not in pod, "a DaemonSet's pods restart (Always); the container waits instead"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1", "gpu-2"]}]}
    ], terms
    env = {e["name"]: e for e in spec["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, env
    assert spec["command"][:3] == ["/bin/sh", "-c", plugin.NODE_SCRIPT]
    assert sorted(document["config-map"]) == ["upstream-test-driver-rbac.yaml", "upstream-test-driver.yaml"]


def test_the_node_part_runs_on_a_label_the_user_gives_and_needs_nodes_or_a_label() -> None:
    pod = _definition(Part.NODE, node_label="example.com/gpu=true")["podSpec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "example.com/gpu": "true"}, pod
    assert "affinity" not in pod, pod
    with pytest.raises(UsageError, match="the node part runs on the driver's nodes"):
        _definition(Part.NODE)
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        _definition(Part.NODE, node_label="gpu")


def test_on_the_local_cluster_both_parts_reach_the_api_server_from_the_host() -> None:
    for selected, nodes in ((Part.CLUSTER, ()), (Part.NODE, ("real",))):
        settings = plugin.settings_from(
            UPSTREAM_PROFILE, "lab-1", None, None, (), "https://127.0.0.1:6443", nodes, part=selected
        )
        document = plugin.plugin_definition(settings)
        env = {e["name"]: e.get("value") for e in document["spec"]["env"]}
        assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443"), env
        assert document["podSpec"]["hostNetwork"] is True


def test_sonobuoy_plugin_prints_the_node_part_and_refuses_a_part_it_does_not_know(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["sonobuoy-plugin", "--profile", str(UPSTREAM_PROFILE), "--cluster-name", "lab-1"]
    assert cli.main([*argv, "--part", "node", "--node-label", "gpu=yes"]) == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["sonobuoy-config"]["driver"] == "DaemonSet", printed
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--part", "everything"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.count("\n") == 1 and "--part" in err, err


def _run_node_script(tmp_path: Path, fake_entry: str) -> subprocess.Popen[str]:
    """The node part's container command, `dra-conformance` replaced by a script of the test's, in the background."""
    bin_dir, results_dir = tmp_path / "bin", tmp_path / "results"
    bin_dir.mkdir(exist_ok=True)
    results_dir.mkdir(exist_ok=True)
    (bin_dir / "dra-conformance").write_text("#!/bin/sh\n" + fake_entry)
    (bin_dir / "dra-conformance").chmod(0o755)
    command = _definition(Part.NODE, nodes=["n"])["spec"]["command"]
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", protocol.RESULTS_DIR_ENV: str(results_dir)}
    return subprocess.Popen([*command, "--profile", "p"], env=environment, text=True)


def _await_done(results_dir: Path) -> None:
    deadline = time.monotonic() + TERM_DEADLINE
    while not (results_dir / protocol.DONE_FILE).exists():
        assert time.monotonic() < deadline, "the node part's container wrote no done file"
        time.sleep(0.05)


def test_the_node_container_runs_the_entry_once_then_waits_until_deleted(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake = f'echo run >> {calls}; printf /x.tar.gz > "${protocol.RESULTS_DIR_ENV}/done"; exit 0\n'
    for _ in range(2):  # the second start is the DaemonSet restarting the container: the done file is there
        container = _run_node_script(tmp_path, fake)
        _await_done(tmp_path / "results")
        time.sleep(0.3)
        assert container.poll() is None, "the container exited: its DaemonSet would run the suite again"
        container.send_signal(signal.SIGTERM)
        assert container.wait(timeout=TERM_DEADLINE) == 0
    assert calls.read_text() == "run\n", "the entry ran again after a restart"


def test_the_node_container_writes_a_failed_result_when_the_entry_dies_before_writing_any(tmp_path: Path) -> None:
    container = _run_node_script(tmp_path, "echo broken >&2; exit 3\n")
    results_dir = tmp_path / "results"
    _await_done(results_dir)
    container.send_signal(signal.SIGTERM)
    container.wait(timeout=TERM_DEADLINE)
    document = yaml.safe_load((results_dir / protocol.RESULTS_FILE).read_text())
    assert "exited with code 3 before writing results" in document["items"][0]["name"], document


@pytest.mark.parametrize(
    ("fixtures", "node_level"),
    [
        (["real_node", "namespace"], True),
        (["interposer"], True),
        (["driver_sockets", "driver_client"], True),
        (["kubelet", "tracker"], True),
        (["api_client", "namespace", "driver_under_test"], False),
        ([], False),
    ],
)
def test_a_check_is_node_level_when_it_needs_the_driver_sockets_or_the_node(
    fixtures: list[str], node_level: bool
) -> None:
    assert part.is_node_level(fixtures) is node_level


SPLIT_DEMO = """
import pytest

@pytest.fixture
def real_node():
    return "node"

@pytest.fixture
def api_client():
    return "api"

def test_on_the_node(real_node, request):
    request.node.user_properties.append(("capabilities", "rollingUpdate"))

def test_through_the_api(api_client):
    pass

def test_not_applicable_here(api_client):
    pytest.skip("not applicable: no such thing here")
"""


def _selected(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-p", part.__name__, *args)
    return sorted(line.split("::")[-1].split(" ")[0] for line in result.stdout.lines if "::" in line)


def test_each_part_selects_its_checks_by_the_marker_and_together_they_select_all(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_split_demo=SPLIT_DEMO)
    node = _selected(pytester, "--collect-only", "-q", "-m", part.marker_expression(Part.NODE) or "")
    cluster = _selected(pytester, "--collect-only", "-q", "-m", part.marker_expression(Part.CLUSTER) or "")
    assert node == ["test_on_the_node"], node
    assert cluster == ["test_not_applicable_here", "test_through_the_api"], cluster
    assert part.selection_args(Part.WHOLE) == ()


def test_the_bundled_suites_split_with_the_node_checks_in_the_node_part(pytester: pytest.Pytester) -> None:
    suites = str(paths.suites_dir())
    node = set(_selected(pytester, "--collect-only", "-q", suites, "-m", NODE_MARKER))
    cluster = set(_selected(pytester, "--collect-only", "-q", suites, "-m", f"not {NODE_MARKER}"))
    every = set(_selected(pytester, "--collect-only", "-q", suites))
    assert node and cluster and not node & cluster and node | cluster == every, (len(node), len(cluster), len(every))
    for name in (
        "test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance",
        "test_four_layer_record[all-four-green]",
    ):
        if any(n.startswith(name.split("[")[0]) for n in every):
            assert any(n.startswith(name.split("[")[0]) for n in node), f"{name} is not node-level"
    assert not {n for n in node if n.startswith("test_node_identity")}, "an RBAC check landed on the node"


def test_the_part_record_holds_each_checks_outcome_capabilities_and_the_selection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_split_demo=SPLIT_DEMO)
    record_file = pytester.path / "record.json"
    # The recorder keeps the bundled suites' checks: run the demo from a suites/ directory.
    suites = pytester.mkdir("suites")
    (suites / "test_split_demo.py").write_text(SPLIT_DEMO)
    pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", part.__name__, f"{part.RECORD_OPTION}={record_file}", "suites"
    )
    collected, filters, stopped, checks = part.read_record(json.loads(record_file.read_text()))
    assert len(collected) == 3 and filters == {"-k": "", "-m": ""} and stopped == "", (collected, filters)
    by_name = {nodeid.split("::")[-1]: result for nodeid, result in checks.items()}
    assert by_name["test_on_the_node"].capabilities == ("rollingUpdate",), by_name
    assert str(by_name["test_on_the_node"].outcome) == "passed"
    assert str(by_name["test_not_applicable_here"].outcome) == "not applicable"
    assert by_name["test_not_applicable_here"].reason == "not applicable: no such thing here"


def test_the_recorded_properties_are_the_ones_the_certification_hooks_set() -> None:
    assert part.CAPABILITY_PROPERTY == certification_hooks.CAPABILITY_PROPERTY
    assert part.OBLIGATION_PROPERTY == certification_hooks.OBLIGATION_PROPERTY
    assert part.BASIS_PROPERTY == certification_hooks.BASIS_PROPERTY
    assert part.OBLIGATION_CAPABILITY_PROPERTY == certification_hooks.OBLIGATION_CAPABILITY_PROPERTY


def test_a_part_run_records_its_checks_and_its_node_part_keeps_temporary_files_under_the_scratch_dir(
    tmp_path: Path,
) -> None:
    settings = entry.EntrySettings(
        UPSTREAM_PROFILE, "lab-1", tmp_path, ("-m", NODE_MARKER), Part.NODE, "gpu-1", tmp_path / "scratch"
    )
    command = entry.run_command(settings, tmp_path / "reports", tmp_path / "scratch" / "x")
    assert command[:2] == ["env", f"TMPDIR={tmp_path / 'scratch' / 'x'}"], command
    assert command[-3:] == ["-m", NODE_MARKER, f"{part.RECORD_OPTION}={tmp_path / 'reports' / part.RECORD_FILE}"]
    whole = entry.run_command(entry.EntrySettings(UPSTREAM_PROFILE, "lab-1", tmp_path), tmp_path / "reports")
    assert not any(part.RECORD_OPTION in arg for arg in whole) and whole[0] != "env", whole


def test_a_node_part_without_its_node_name_is_one_line_and_still_writes_done(tmp_path: Path) -> None:
    settings = entry.EntrySettings(UPSTREAM_PROFILE, "lab-1", tmp_path, (), Part.NODE, None)
    assert entry.entry(settings, runner=lambda *_: pytest.fail("no run without a node")) == entry.EXIT_USAGE
    assert (tmp_path / protocol.DONE_FILE).is_file()
    assert entry.node_from({"NODE_NAME": "gpu-1"}) == "gpu-1" and entry.node_from({}) is None


def test_sonobuoys_aggregator_may_read_nodes_to_run_the_node_part_and_nothing_more() -> None:
    role, binding = plugin.aggregator_node_reader("dra-nightly")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}], role
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sonobuoy-serviceaccount", "namespace": "dra-nightly"}
    ], binding


@pytest.mark.needs_go
def test_sonobuoy_itself_accepts_both_parts_and_keeps_the_node_part_after_the_cluster_part(tmp_path: Path) -> None:
    from dra_conformance.backends import registry
    from dra_conformance.config import SuiteConfig

    binary = registry.build_sonobuoy(SuiteConfig())
    files = []
    for selected, nodes in ((Part.CLUSTER, ()), (Part.NODE, ("gpu-1",))):
        settings = plugin.settings_from(UPSTREAM_PROFILE, "lab-1", None, None, (), None, nodes, part=selected)
        files += ["--plugin", str(tmp_path / f"{settings.plugin_name}.yaml")]
        Path(files[-1]).write_text(plugin.render_plugin(settings))
    command = [str(binary), "gen", *files, "--kubernetes-version", "v1.37.2", "--kubeconfig", "/dev/null"]
    generated = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert generated.returncode == 0, generated.stderr
    documents = [d for d in yaml.safe_load_all(generated.stdout) if d]
    plugins_cm = next(d for d in documents if d["metadata"]["name"] == "sonobuoy-plugins-cm")
    loaded = [yaml.safe_load(text) for _, text in sorted(plugins_cm["data"].items())]
    by_name = {p["sonobuoy-config"]["plugin-name"]: p for p in loaded}
    node = by_name[plugin.NODE_PLUGIN_NAME]
    assert node["sonobuoy-config"]["driver"] == "DaemonSet" and node["sonobuoy-config"]["order"] == 1, node
    assert by_name[plugin.PLUGIN_NAME]["sonobuoy-config"].get("order", 0) == 0
    mounts = {m["mountPath"] for m in node["spec"]["volumeMounts"]}
    assert {"/var/lib/kubelet", str(protocol.CONFIG_DIR)} <= mounts, mounts


def test_the_node_part_may_roll_the_drivers_daemonset_in_the_drivers_namespace_only() -> None:
    role, binding = plugin.driver_rollout_role("gpu-driver", "dra-nightly")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "gpu-driver", role
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "patch"]}]
    assert binding["metadata"]["namespace"] == "gpu-driver" and binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": plugin.SERVICE_ACCOUNT, "namespace": "dra-nightly"}
    ]

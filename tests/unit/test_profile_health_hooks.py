"""The profile's health section: the hooks that make one device unhealthy and healthy again, and running them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.driver import health_hook
from dra_conformance.driver.profile import Hook, load_profile, render_hook
from dra_conformance.errors import ProfileError, UsageError
from dra_conformance.model.driver import DriverEndpoint

# A minimal valid profile that declares the health stream; the section is appended to it.
VALID = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
identity:
  serviceAccount: {namespace: drivers, name: gpu}
deviceClasses:
- name: gpu
  create: true
devices:
  perNode: 2
capabilities:
  healthStream: true
"""

COMMANDS = """\
health:
  makeUnhealthy:
    command: [gpuctl, fail, "--node={node}", "--device={device}", "--pool={pool}", "--socket={plugins_dir}/ctl.sock"]
  makeHealthy:
    command: [gpuctl, restore, "--device={device}"]
"""

FILES = """\
health:
  makeUnhealthy:
    writeFile: {path: "{plugins_dir}/faults/{device}", content: "xid 79 on {device}"}
  makeHealthy:
    removeFile: "{plugins_dir}/faults/{device}"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def test_command_hooks_load_as_declared(tmp_path: Path) -> None:
    hooks = load_profile(_write(tmp_path, VALID + COMMANDS)).health
    assert hooks is not None
    assert hooks.make_unhealthy == Hook(
        command=(
            "gpuctl",
            "fail",
            "--node={node}",
            "--device={device}",
            "--pool={pool}",
            "--socket={plugins_dir}/ctl.sock",
        )
    )
    assert hooks.make_healthy.command == ("gpuctl", "restore", "--device={device}")


def test_file_hooks_load_as_declared(tmp_path: Path) -> None:
    hooks = load_profile(_write(tmp_path, VALID + FILES)).health
    assert hooks is not None
    assert hooks.make_unhealthy == Hook(write_file=("{plugins_dir}/faults/{device}", "xid 79 on {device}"))
    assert hooks.make_healthy == Hook(remove_file="{plugins_dir}/faults/{device}")


def test_without_the_section_the_check_has_no_hook(tmp_path: Path) -> None:
    assert load_profile(_write(tmp_path, VALID)).health is None


def test_the_reference_profiles_declare_the_drivers_health_command() -> None:
    profiles = paths.fixtures_dir() / "profiles"
    for name in ("reference-driver.yaml", "reference-driver-shipped.yaml"):
        hooks = load_profile(profiles / name).health
        assert hooks is not None, name
        assert hooks.make_unhealthy.command[:2] == ("{bin:reference_driver_go}", "health")
        assert hooks.make_unhealthy.command[-1] == "--set=unhealthy"
        assert hooks.make_healthy.command[-1] == "--set=healthy"
    assert load_profile(profiles / "upstream-test-driver.yaml").health is None


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("  healthStream: true\n", "  statusDevices: true\n", "health: its hooks are judged on the health stream"),
        ("  makeHealthy:\n    command: [gpuctl, restore", "  makeHealty:\n    command: [gpuctl, restore", "health"),
        ('--device={device}"]', '--device={device_name}"]', "unknown placeholder {device_name} in a hook"),
        ('"--node={node}"', '"--kubeconfig={kubeconfig}"', "unknown placeholder {kubeconfig} in a hook"),
        ("[gpuctl, fail", '["{bin:dra_test_driver}", fail', "unknown placeholder {bin:dra_test_driver}"),
        (
            "[gpuctl, fail",
            "[/opt/gpu/bin/gpuctl, fail",
            "health.makeUnhealthy.command[0]: /opt/gpu/bin/gpuctl is outside",
        ),
        ('    command: [gpuctl, restore, "--device={device}"]', "    {}", "health.makeHealthy"),
    ],
    ids=["no-health-stream", "typo", "unknown-placeholder", "run-placeholder", "other-binary", "host-program", "empty"],
)
def test_a_hook_that_cannot_run_is_one_located_line(tmp_path: Path, old: str, new: str, problem: str) -> None:
    text = VALID + COMMANDS
    assert old in text
    with pytest.raises(ProfileError) as raised:
        load_profile(_write(tmp_path, text.replace(old, new)))
    assert problem in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("{plugins_dir}/../../etc/{device}", "leaves {plugins_dir} through `..`"),
        ("/etc/gpu/{device}", "/etc/gpu/x is outside"),
        ("{python}/{device}", "a hook's file starts with {plugins_dir} or {kubelet_root}"),
        ("faults/{device}", "a hook's file is absolute"),
        ("{plugins_dir}/{python}", "{python} may not stand inside a hook's file path"),
    ],
    ids=["dot-dot", "host-path", "other-run-dir", "relative", "python-inside"],
)
def test_a_hook_file_stays_in_the_nodes_directories_or_host_paths(tmp_path: Path, path: str, problem: str) -> None:
    text = VALID + FILES.replace('"{plugins_dir}/faults/{device}", content', f'"{path}", content')
    with pytest.raises(ProfileError) as raised:
        load_profile(_write(tmp_path, text))
    assert "health.makeUnhealthy.writeFile" in str(raised.value)
    assert problem in str(raised.value)


def test_a_hook_file_under_host_paths_is_allowed(tmp_path: Path) -> None:
    text = VALID + "hostPaths: [/etc/gpu]\n" + FILES.replace("{plugins_dir}/faults", "/etc/gpu")
    hooks = load_profile(_write(tmp_path, text)).health
    assert hooks is not None and hooks.make_healthy.remove_file == "/etc/gpu/{device}"


def _endpoint(tmp_path: Path) -> DriverEndpoint:
    return DriverEndpoint("gpu.example.com", "node-a", tmp_path / "kubelet")


def test_hook_values_fill_device_pool_and_this_machines_directories(tmp_path: Path) -> None:
    profile = load_profile(_write(tmp_path, VALID + COMMANDS))
    values = health_hook.hook_values(
        profile, _endpoint(tmp_path), "gpu-7", "node-a", {"reference_driver.go_binary": "/cache/fake-dra"}
    )
    assert (
        render_hook("{plugins_dir}/{device}@{pool}", values)
        == f"{tmp_path}/kubelet/plugins/gpu.example.com/gpu-7@node-a"
    )
    assert render_hook("{bin:reference_driver_go} --node={node}", values) == "/cache/fake-dra --node=node-a"
    without = health_hook.hook_values(profile, _endpoint(tmp_path), "gpu-7", "node-a", {})
    with pytest.raises(UsageError, match=r"no value for placeholder \{bin:reference_driver_go\}"):
        render_hook("{bin:reference_driver_go}", without)


def test_run_writes_and_removes_the_file_and_reports_a_failing_command(tmp_path: Path) -> None:
    values = {"device": "gpu-7", "plugins_dir": str(tmp_path), "python": sys.executable}
    assert health_hook.run(Hook(write_file=("{plugins_dir}/{device}", "failed: {device}")), values) is None
    assert (tmp_path / "gpu-7").read_text() == "failed: gpu-7"
    assert health_hook.run(Hook(remove_file="{plugins_dir}/{device}"), values) is None
    assert not (tmp_path / "gpu-7").exists()
    assert health_hook.run(Hook(remove_file="{plugins_dir}/{device}"), values) is None  # already gone
    failing = Hook(command=("{python}", "-c", "import sys; sys.exit('no such device {device}')"))
    problem = health_hook.run(failing, values)
    assert problem is not None and "exited 1: no such device gpu-7" in problem
    assert health_hook.run(Hook(command=("{python}", "-c", "pass")), values) is None
    slow = Hook(command=("{python}", "-c", "import time; time.sleep(5)"))
    assert "did not exit within 0.2s" in (health_hook.run(slow, values, timeout=0.2) or "")

"""The wheel alone runs dra-conformance: built from this checkout, installed into a new venv, used from an empty dir.

What the wheel must carry is checked file by file; what it does is checked by running it: the CLI finds the
cached pinned binaries from the Go modules it ships, a bundled suite passes, and a vendor's own test uses our
fixtures through the `pytest11` entry point. The runs attach to the session's local cluster (its state directory)
so that CI starts no second cluster; `dra-conformance run` starting its own is shown in the README's first command.
"""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.backends.registry import build_local_binaries
from dra_conformance.config import SuiteConfig
from dra_conformance.model.cluster import BackendCapability, ClusterInfo

# One worker builds and installs the wheel once for the whole module (loadgroup keeps the group together).
pytestmark = pytest.mark.xdist_group("wheel")

# Building the wheel is a local copy; installing it fetches its dependencies (pip's cache makes that seconds).
INSTALL_DEADLINE = 900.0
# One bundled test or one vendor test against a running cluster, plus Python and plugin start-up.
RUN_DEADLINE = 300.0

VENDOR_TEST = """
from kubernetes import client


def test_vendor_check_runs_in_our_namespace(cluster, namespace, api_client):
    assert cluster.nodes, cluster
    found = client.CoreV1Api(api_client).read_namespace(namespace)
    assert found.metadata.labels["dra-conformance.io/run-id"]
"""


@dataclass(frozen=True)
class Installed:
    """A wheel built from this checkout and a new venv it is installed into."""

    wheel: Path
    bin: Path


def _run(command: list[str], cwd: Path, deadline: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=deadline, check=False)


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{(result.stdout + result.stderr)[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """Build the wheel and install it into a new venv in an empty temp dir."""
    if paths.installed():
        pytest.skip("runs from a checkout: it builds the wheel of that checkout")
    scratch = tmp_path_factory.mktemp("wheel")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(scratch), str(paths.CHECKOUT)],
        scratch,
        INSTALL_DEADLINE,
    )
    assert built.returncode == 0, f"pip wheel: {_tail(built)}"
    wheel = next(scratch.glob("dra_conformance-*.whl"))
    venv.EnvBuilder(with_pip=True).create(scratch / "venv")
    bin_dir = scratch / "venv" / "bin"
    added = _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], scratch, INSTALL_DEADLINE)
    assert added.returncode == 0, f"pip install {wheel.name}: {_tail(added)}"
    yield Installed(wheel, bin_dir)


def test_wheel_carries_suites_data_cluster_modules_and_reference_programs(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {
        "dra_conformance/plugin/__init__.py",
        "dra_conformance/suites/protocol/test_protocol.py",
        "dra_conformance/fixtures/scenarios/healthy.yaml",
        "dra_conformance/fixtures/rbac/matrix.yaml",
        "dra_conformance/fixtures/profiles/reference-driver.yaml",
        "dra_conformance/fixtures/profiles/reference-driver-rbac.yaml",
        "dra_conformance/fixtures/profiles/upstream-test-driver.yaml",
        "dra_conformance/driver/profile.schema.json",
        "dra_conformance/clusters/local/kube/go.mod",
        "dra_conformance/clusters/local/kube/go.sum",
        "dra_conformance/clusters/local/etcd/main.go",
        "dra_conformance/clusters/local/kwok-stages.yaml",
        "dra_conformance/reference_driver_deploy/rbac.yaml",
        "dra_conformance/report/allure_npm/package.json",
        "dra_conformance/report/allure_npm/package-lock.json",
        "dra_wire/kubelet_api.py",
        "fake_dra/__main__.py",
        "fake_metrics/__main__.py",
    }
    assert expected <= names, f"missing from {installed.wheel.name}: {sorted(expected - names)}"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "[pytest11]\ndra_conformance = dra_conformance.plugin" in text, text


def test_installed_cli_finds_the_cached_binaries_from_the_modules_it_ships(
    installed: Installed, tmp_path: Path
) -> None:
    result = _run([str(installed.bin / "dra-conformance"), "build"], tmp_path, RUN_DEADLINE)
    assert result.returncode == 0, _tail(result)
    for name, path in build_local_binaries(SuiteConfig()).items():
        # The cache key hashes go.mod, go.sum and main.go: the same path means the same module files.
        assert f"{name}: {path}" in result.stdout, f"{name} resolved elsewhere (rebuilt?): {_tail(result)}"


def test_bundled_suite_runs_from_an_empty_directory(installed: Installed, cluster: ClusterInfo, tmp_path: Path) -> None:
    if BackendCapability.LOCAL_PROCESSES not in cluster.capabilities:
        pytest.skip(f"attaches to the local cluster's state directory; backend {cluster.backend} has none")
    result = _run(
        [
            str(installed.bin / "dra-conformance"),
            "run",
            "-n",
            "1",
            "-k",
            "test_registration_names_the_driver",
            f"--dra-cluster-state-dir={cluster.details['state_dir']}",
        ],
        tmp_path,
        RUN_DEADLINE,
    )
    assert result.returncode == 0 and " 1 passed" in result.stdout, _tail(result)
    junit = list(tmp_path.glob("reports/*/junit.xml"))
    assert len(junit) == 1, f"reports belong in the directory the command runs in: {junit}; {_tail(result)}"
    assert 'tests="1"' in junit[0].read_text(), junit[0].read_text()[:500]


@pytest.mark.parametrize("load", ["entry point", "-p dra_conformance"])
def test_vendor_repository_uses_our_fixtures(
    installed: Installed, cluster: ClusterInfo, tmp_path: Path, load: str
) -> None:
    if BackendCapability.LOCAL_PROCESSES not in cluster.capabilities:
        pytest.skip(f"attaches to the local cluster's state directory; backend {cluster.backend} has none")
    (tmp_path / "test_vendor.py").write_text(VENDOR_TEST)
    flags = ["-p", "dra_conformance"] if load.startswith("-p") else []
    result = _run(
        [
            str(installed.bin / "python"),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *flags,
            f"--dra-cluster-state-dir={cluster.details['state_dir']}",
            "test_vendor.py",
        ],
        tmp_path,
        RUN_DEADLINE,
    )
    assert result.returncode == 0 and " 1 passed" in result.stdout, _tail(result)

"""The wheels alone run dra-conformance: built from this checkout, installed into a new venv, used from an empty dir.

The checkout holds three distributions: the engine (root) and dra-wire and fake-metrics (drivers/*), which the
engine depends on. Each file ships in exactly one of their wheels, and dra-wire's carries the kubelet plugin API
bindings its build compiled. What they do is checked by running them, with no Go on PATH: the CLI finds the cached
pinned binaries from the Go modules it ships, a bundled suite passes through the kubelet-plugin sockets, and a
vendor's own test uses our fixtures through the `pytest11` entry point. The runs attach to the session's local
cluster (its state directory) so that CI starts no second cluster; `dra-conformance run` starting its own is shown
in the README's first command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
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
from dra_wire.kubelet_pin import PACKAGE, PROTOS

# One worker builds and installs the wheel once for the whole module (loadgroup keeps the group together).
pytestmark = pytest.mark.xdist_group("wheel")

# Each distribution's directory and its top-level package; the engine's wheel also holds the data it maps in.
DISTRIBUTIONS = {
    "dra_conformance": paths.CHECKOUT,
    "dra_wire": paths.CHECKOUT / "drivers" / "dra-wire",
    "fake_metrics": paths.CHECKOUT / "drivers" / "fake-metrics",
}
# Building the wheels is a local copy (dra-wire's also compiles the bindings, from the Go module cache or the Go
# module proxy); installing them fetches their dependencies (pip's cache makes that seconds).
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
    """The wheels built from this checkout (top-level package -> wheel) and a new venv they are installed into."""

    wheels: dict[str, Path]
    bin: Path

    @property
    def wheel(self) -> Path:
        """The engine's wheel."""
        return self.wheels["dra_conformance"]

    def without_go(self) -> dict[str, str]:
        """An environment whose PATH has the venv and the system's bin directories, and no Go toolchain."""
        path = os.pathsep.join([str(self.bin), "/usr/bin", "/bin"])
        assert shutil.which("go", path=path) is None, f"go is on {path}: the no-Go check would prove nothing"
        return {**os.environ, "PATH": path}


def _names(wheel: Path) -> set[str]:
    """The files a wheel installs, its own metadata left out."""
    return {name for name in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in name}


def _metadata(wheel: Path) -> str:
    archive = zipfile.ZipFile(wheel)
    return archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()


def _run(
    command: list[str], cwd: Path, deadline: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=deadline, check=False, env=env)


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{(result.stdout + result.stderr)[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """Build the four wheels and install them into a new venv in an empty temp dir.

    They are installed by path, in one command: our own distributions never come from an index.
    """
    if paths.installed():
        pytest.skip("runs from a checkout: it builds the wheels of that checkout")
    scratch = tmp_path_factory.mktemp("wheel")
    sources = [str(directory) for directory in DISTRIBUTIONS.values()]
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(scratch), *sources],
        scratch,
        INSTALL_DEADLINE,
    )
    assert built.returncode == 0, f"pip wheel: {_tail(built)}"
    wheels = {package: next(scratch.glob(f"{package}-*.whl")) for package in DISTRIBUTIONS}
    venv.EnvBuilder(with_pip=True).create(scratch / "venv")
    bin_dir = scratch / "venv" / "bin"
    added = _run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", *map(str, wheels.values())], scratch, INSTALL_DEADLINE
    )
    assert added.returncode == 0, f"pip install {sorted(w.name for w in wheels.values())}: {_tail(added)}"
    yield Installed(wheels, bin_dir)


def test_engine_wheel_carries_suites_data_and_cluster_modules(installed: Installed) -> None:
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
        "dra_conformance/reference_driver_go/go.mod",
        "dra_conformance/reference_driver_go/deploy/rbac.yaml",
        "dra_conformance/reference_driver_go/deploy/fabric/controller-rbac.yaml",
        "dra_conformance/report/allure_npm/package.json",
        "dra_conformance/report/allure_npm/package-lock.json",
    }
    assert expected <= names, f"missing from {installed.wheel.name}: {sorted(expected - names)}"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "[pytest11]\ndra_conformance = dra_conformance.plugin" in text, text


def test_each_file_ships_in_exactly_one_wheel(installed: Installed) -> None:
    names = {package: _names(wheel) for package, wheel in installed.wheels.items()}
    for package, files in names.items():
        tops = {name.split("/", 1)[0] for name in files}
        assert tops == {package}, f"{installed.wheels[package].name} holds top-level {sorted(tops - {package})}"
    for package, directory in DISTRIBUTIONS.items():
        if package == "dra_conformance":
            continue
        sources = {str(path.relative_to(directory)) for path in (directory / package).rglob("*.py")}
        sources = {name for name in sources if not name.startswith(f"{package}/{PACKAGE}/")}
        assert sources <= names[package], f"{package} wheel lacks {sorted(sources - names[package])}"


def test_engine_depends_on_the_pinned_releases_of_the_other_three(installed: Installed) -> None:
    requires = {line.removeprefix("Requires-Dist: ") for line in _metadata(installed.wheel).splitlines()}
    for package, directory in DISTRIBUTIONS.items():
        if package == "dra_conformance":
            continue
        project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
        assert f"{project['name']}=={project['version']}" in requires, (project["name"], sorted(requires))


def test_dra_wire_wheel_carries_typed_bindings_and_needs_no_build_tools(installed: Installed) -> None:
    names = _names(installed.wheels["dra_wire"])
    for dest in PROTOS:
        module = f"dra_wire/{PACKAGE}/{dest.removesuffix('.proto')}"
        expected = {f"{module}{suffix}" for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")}
        assert expected <= names, f"missing from dra-wire's wheel: {sorted(expected - names)}"
    assert not [name for name in names if name.endswith(".proto")], "the wheel ships bindings, not upstream .proto"
    requires = [line for line in _metadata(installed.wheels["dra_wire"]).splitlines() if line.startswith("Requires")]
    assert not [r for r in requires if "grpcio-tools" in r or "mypy-protobuf" in r], requires


def test_installed_cli_finds_the_cached_binaries_from_the_modules_it_ships(
    installed: Installed, tmp_path: Path
) -> None:
    result = _run([str(installed.bin / "dra-conformance"), "build"], tmp_path, RUN_DEADLINE)
    assert result.returncode == 0, _tail(result)
    for name, path in build_local_binaries(SuiteConfig()).items():
        # The cache key hashes go.mod, go.sum and every .go file: the same path means the same module files.
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
            f"--dra-state-dir={cluster.details['state_dir']}",
        ],
        tmp_path,
        RUN_DEADLINE,
        env=installed.without_go(),
    )
    assert result.returncode == 0 and " 1 passed" in result.stdout, _tail(result)
    junit = list(tmp_path.glob("reports/*/junit.xml"))
    assert len(junit) == 1, f"reports belong in the directory the command runs in: {junit}; {_tail(result)}"
    assert 'tests="1"' in junit[0].read_text(), junit[0].read_text()[:500]
    # The bundled suites sit outside the directory the run starts in: their checks keep their `suites/...` ids, so
    # the run's summary knows them (it once wrote none from an installed package).
    summaries = list(tmp_path.glob("reports/*/summary.json"))
    assert len(summaries) == 1, f"the run wrote no certification summary: {_tail(result)}"
    summary = json.loads(summaries[0].read_text())
    assert list(summary["suites"]) == ["protocol"] and summary["totals"] == {"passed": 1}, (
        f"suites {summary['suites']}, totals {summary['totals']}"
    )


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
            f"--dra-state-dir={cluster.details['state_dir']}",
            "test_vendor.py",
        ],
        tmp_path,
        RUN_DEADLINE,
    )
    assert result.returncode == 0 and " 1 passed" in result.stdout, _tail(result)

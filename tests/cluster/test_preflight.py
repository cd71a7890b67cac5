"""A run against an unusable cluster stops before the first test: one line naming the cluster and the cause, exit 2.

Each case points `--cluster existing` at the real local API server in a way a user gets wrong (a dead port, a
server that never answers, a bad token, an identity without rights) and runs the command as a user would.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.backends.base import ClusterInfo
from dra_conformance.kube import builders, kubeconfig
from dra_conformance.kube.identities import request_token
from dra_conformance.kube.preflight import check_cluster
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.plugin.exits import EXIT_CANNOT_RUN

# Guards against a hang only: Python start-up plus a preflight that gives each request at most 4 s to connect.
COMMAND_DEADLINE = 60.0


def _kubeconfig(api_client: client.ApiClient, path: Path, *, server: str | None = None, token: str) -> Path:
    ca_pem = Path(api_client.configuration.ssl_ca_cert).read_bytes()
    document = kubeconfig.render(server or str(api_client.configuration.host), ca_pem, user="preflight", token=token)
    return kubeconfig.write(path, document)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) but never says a word, like a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once the probe is closed


def _run(entry: str, kubeconfig_path: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    command = (
        [sys.executable, "-m", "dra_conformance.cli", "run", "--cluster", "existing"]
        if entry == "cli"
        else [sys.executable, "-m", "pytest", "--cluster=existing"]
    )
    return subprocess.run(
        [*command, f"--kubeconfig={kubeconfig_path}", f"--reports-dir={workdir / 'reports'}", "-p", "no:cacheprovider"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=COMMAND_DEADLINE,
        check=False,
    )


def _assert_one_line_exit(result: subprocess.CompletedProcess[str], workdir: Path, *expected: str) -> None:
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    observed = f"exit {result.returncode}, output {lines}"
    assert result.returncode == EXIT_CANNOT_RUN, observed
    assert len(lines) == 1, observed
    for part in expected:
        assert part in lines[0], f"{part!r} missing: {observed}"
    assert not (workdir / "reports").exists(), f"a refused run wrote reports: {list((workdir / 'reports').rglob('*'))}"


@pytest.mark.parametrize("entry", ["cli", "pytest"])
def test_dead_server_stops_the_run_in_one_line(entry: str, api_client: client.ApiClient, tmp_path: Path) -> None:
    server = _closed_port()
    path = _kubeconfig(api_client, tmp_path / "dead.kubeconfig", server=server, token="unused")
    _assert_one_line_exit(_run(entry, path, tmp_path), tmp_path, server, "unreachable", "Connection refused")


def test_server_that_never_answers_stops_the_run_in_one_line(
    silent_server: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    path = _kubeconfig(api_client, tmp_path / "silent.kubeconfig", server=silent_server, token="unused")
    _assert_one_line_exit(_run("cli", path, tmp_path), tmp_path, silent_server, "unreachable", "timed out")


def test_rejected_token_stops_the_run_in_one_line(api_client: client.ApiClient, tmp_path: Path) -> None:
    path = _kubeconfig(api_client, tmp_path / "bad-token.kubeconfig", token="not-a-valid-token")
    _assert_one_line_exit(
        _run("cli", path, tmp_path), tmp_path, str(api_client.configuration.host), "not authenticated", "401"
    )


def test_identity_without_namespace_rights_stops_the_run_in_one_line(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str, tmp_path: Path
) -> None:
    tracker.create(builders.service_account("no-rights", namespace))
    path = _kubeconfig(
        api_client, tmp_path / "no-rights.kubeconfig", token=request_token(api_client, namespace, "no-rights")
    )
    _assert_one_line_exit(
        _run("cli", path, tmp_path),
        tmp_path,
        "forbidden",
        f"system:serviceaccount:{namespace}:no-rights may not create namespaces",
    )


def test_usable_cluster_passes_the_preflight(cluster: ClusterInfo) -> None:
    result = check_cluster(cluster.kubeconfig)
    assert result.version.startswith("v1.37."), result
    assert result.resource_versions[0] == "v1", f"resource.k8s.io/v1 must be served and preferred: {result}"
    assert result.user, result

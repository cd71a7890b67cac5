"""A run against an unusable cluster stops before the first test: one line naming the cluster and the cause, exit 2.

Each case points `--cluster existing` at the real local API server in a way a user gets wrong (a dead port, a
server that never answers, a CA that did not sign the server's certificate, a bad token, an identity without
rights, an identity lacking one right a suite needs, or rights every suite needs) and runs the command as a user
would. An identity that lacks several rights is refused naming every one of them: one line, and an indented line
per group of suites that need them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.exits import EXIT_CANNOT_RUN
from dra_conformance.kube import builders, kubeconfig, waits
from dra_conformance.kube.identities import request_token, token_client
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.kube.preflight import check_cluster, check_rights
from dra_conformance.kube.rights import (
    RESOURCE,
    SUITE_RIGHTS,
    Right,
    cluster_role_rules,
    missing_groups,
    needed_rights,
    suites_phrase,
)
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo

# Guards against a hang only: Python start-up plus a preflight that gives each request at most 4 s to connect.
COMMAND_DEADLINE = 60.0
# A run that goes on (--allow-partial) collects the suites and writes its report; still no check runs.
PARTIAL_RUN_DEADLINE = 240.0
# RBAC changes reach the API server's authorizer through an informer, within a second or two.
RBAC_PROPAGATION = 30.0
# Issue 20: a CI identity with rights to namespaces, pods, events, nodes, claims, templates and slices, but not to
# create DeviceClasses, passed the old preflight and failed 94 checks on "deviceclasses ... cannot create".
CREATE_CLASSES = Right("create", "deviceclasses", RESOURCE, namespaced=False)


def _kubeconfig(
    api_client: client.ApiClient, path: Path, *, server: str | None = None, token: str, ca_pem: bytes | None = None
) -> Path:
    ca_pem = ca_pem or Path(api_client.configuration.ssl_ca_cert).read_bytes()
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


def _run(
    entry: str, kubeconfig_path: Path, workdir: Path, *extra: str, deadline: float = COMMAND_DEADLINE
) -> subprocess.CompletedProcess[str]:
    command = (
        [sys.executable, "-m", "dra_conformance.cli", "run", "--cluster", "existing", f"--kubeconfig={kubeconfig_path}"]
        if entry == "cli"
        else [sys.executable, "-m", "pytest", "--dra-cluster=existing", f"--dra-kubeconfig={kubeconfig_path}"]
    )
    return subprocess.run(
        [
            *command,
            f"--dra-reports-dir={workdir / 'reports'}",
            "-p",
            "no:cacheprovider",
            *extra,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=deadline,
        check=False,
    )


def _assert_one_line_exit(
    result: subprocess.CompletedProcess[str], workdir: Path, *expected: str, listed: Iterable[str] = ()
) -> None:
    """Exit 2, nothing written, one line holding each of `expected`, then exactly the indented lines `listed`."""
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    observed = f"exit {result.returncode}, output {lines}"
    assert result.returncode == EXIT_CANNOT_RUN, observed
    assert lines[1:] == list(listed), observed
    for part in expected:
        assert part in lines[0], f"{part!r} missing: {observed}"
    assert "Traceback" not in observed, observed
    assert not (workdir / "reports").exists(), f"a refused run wrote reports: {list((workdir / 'reports').rglob('*'))}"


def _group_lines(missing: Iterable[Right]) -> list[str]:
    """The indented lines of a refusal that names `missing`: one per group of suites that need them."""
    needed = needed_rights()
    return [f"  for {suites}: {rights}" for suites, rights in missing_groups({r: needed[r] for r in missing})]


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


@pytest.mark.parametrize("entry", ["cli", "pytest"])
def test_server_certificate_the_kubeconfigs_ca_did_not_sign_stops_the_run_in_one_line(
    entry: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    """The real API server, and a kubeconfig whose certificate-authority-data is a CA of its own (a copy-paste slip)."""
    unrelated = CertificateAuthority.create("not-the-clusters-ca").cert_pem
    path = _kubeconfig(api_client, tmp_path / "other-ca.kubeconfig", token="unused", ca_pem=unrelated)
    _assert_one_line_exit(
        _run(entry, path, tmp_path),
        tmp_path,
        f"cluster {api_client.configuration.host} (kubeconfig {path}) is not usable: "
        "certificate not trusted by the kubeconfig's CA",
        "(unable to get local issuer certificate)",
    )


def test_rejected_token_stops_the_run_in_one_line(api_client: client.ApiClient, tmp_path: Path) -> None:
    path = _kubeconfig(api_client, tmp_path / "bad-token.kubeconfig", token="not-a-valid-token")
    _assert_one_line_exit(
        _run("cli", path, tmp_path), tmp_path, str(api_client.configuration.host), "not authenticated", "401"
    )


@pytest.mark.parametrize("partial", [[], ["--allow-partial"]], ids=["refused", "allow-partial-cannot-help"])
def test_identity_without_rights_is_refused_naming_every_right_it_lacks_at_once(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str, tmp_path: Path, partial: list[str]
) -> None:
    """No RBAC for it at all: the refusal names all of the rights (not the first a step trips over), even partial."""
    tracker.create(builders.service_account("no-rights", namespace))
    path = _kubeconfig(
        api_client, tmp_path / "no-rights.kubeconfig", token=request_token(api_client, namespace, "no-rights")
    )
    _assert_one_line_exit(
        _run("cli", path, tmp_path, *partial),
        tmp_path,
        f"the suite's identity system:serviceaccount:{namespace}:no-rights lacks {len(needed_rights())} rights; ",
        "(--allow-partial cannot help: no suite runs without the rights every suite needs):",
        listed=_group_lines(needed_rights()),
    )


@pytest.fixture
def identity_lacking(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str, tmp_path: Path
) -> Callable[..., tuple[str, Path]]:
    """`identity_lacking(*rights)`: a ServiceAccount with every right the suites need but `rights`; (user, kubeconfig).

    Its ClusterRole and binding are tracked (deleted after the test); the ServiceAccount goes with the namespace.
    """

    def make(*lacking: Right) -> tuple[str, Path]:
        name = f"{namespace}-ci"
        granted = [right for right in needed_rights() if right not in lacking]
        tracker.create(builders.service_account("ci", namespace))
        tracker.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": cluster_role_rules(granted),
            }
        )
        tracker.create(builders.cluster_role_binding(name, namespace, "ci"))
        token = request_token(api_client, namespace, "ci")
        with token_client(api_client, token) as ci:
            waits.until(
                lambda: (
                    client.AuthorizationV1Api(ci)
                    .create_self_subject_access_review({"spec": {"resourceAttributes": granted[0].review_attributes()}})
                    .status.allowed
                ),
                bool,
                timeout=RBAC_PROPAGATION,
                what=f"ClusterRole {name} in effect for system:serviceaccount:{namespace}:ci",
            )
        return f"system:serviceaccount:{namespace}:ci", _kubeconfig(api_client, tmp_path / "ci.kubeconfig", token=token)

    return make


@pytest.fixture
def identity_without_class_creation(identity_lacking: Callable[..., tuple[str, Path]]) -> tuple[str, Path]:
    """A ServiceAccount holding every right the suites need but `create deviceclasses`; (user, kubeconfig)."""
    return identity_lacking(CREATE_CLASSES)


CREATE_CLASSES = Right("create", "deviceclasses", RESOURCE, namespaced=False)


def _class_creators() -> list[str]:
    """The suites that create DeviceClasses, as rights.py says (every suite with devices of its own)."""
    return sorted(suite for suite, rights in SUITE_RIGHTS.items() if CREATE_CLASSES in rights)


def test_identity_lacking_a_right_a_suite_needs_stops_the_run_in_one_line(
    identity_without_class_creation: tuple[str, Path], tmp_path: Path
) -> None:
    user, path = identity_without_class_creation
    _assert_one_line_exit(
        _run("cli", path, tmp_path),
        tmp_path,
        f"the suite's identity {user} lacks: {CREATE_CLASSES} ({suites_phrase(_class_creators())}); grant the "
        "ClusterRole in ",
        "ci-clusterrole.yaml or pass --allow-partial",
    )


# Issue 45: the nodes are listed by the existing backend itself, after the preflight; an identity lacking them and a
# suite's right once tripped over the listing ("list nodes: Forbidden") before the rights were asked for at all.
LIST_NODES = Right("list", "nodes", namespaced=False)


def test_a_right_every_suite_needs_is_refused_even_with_allow_partial_naming_every_missing_right(
    identity_lacking: Callable[..., tuple[str, Path]], tmp_path: Path
) -> None:
    user, path = identity_lacking(LIST_NODES, CREATE_CLASSES)
    _assert_one_line_exit(
        _run("cli", path, tmp_path, "--allow-partial"),
        tmp_path,
        f"the suite's identity {user} lacks 2 rights; grant the ClusterRole in ",
        "(--allow-partial cannot help: no suite runs without the rights every suite needs):",
        listed=["  for every suite: list nodes", f"  for {suites_phrase(_class_creators())}: {CREATE_CLASSES}"],
    )


def test_allow_partial_skips_the_checks_of_suites_that_need_what_is_missing(
    identity_without_class_creation: tuple[str, Path], tmp_path: Path
) -> None:
    """The controller hands the missing rights to its xdist workers: each skips those suites' checks."""
    _, path = identity_without_class_creation
    result = _run(
        "cli",
        path,
        tmp_path,
        "--allow-partial",
        "-k",
        "test_driver_binds_its_slices_only_to_nodes_that_exist",
        deadline=PARTIAL_RUN_DEADLINE,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    reason = "not applicable: the suite's identity cannot create deviceclasses.resource.k8s.io"
    assert len(skipped) == 1 and reason in skipped[0] and "protocol/test_slices.py" in skipped[0], output[-3000:]


def test_the_clusters_admin_holds_every_right_the_suites_need(cluster: ClusterInfo) -> None:
    assert check_rights(cluster.kubeconfig).missing == {}


def test_usable_cluster_passes_the_preflight(cluster: ClusterInfo) -> None:
    result = check_cluster(cluster.kubeconfig)
    assert result.version.startswith("v1.37."), result
    assert result.resource_versions[0] == "v1", f"resource.k8s.io/v1 must be served and preferred: {result}"
    assert result.user, result

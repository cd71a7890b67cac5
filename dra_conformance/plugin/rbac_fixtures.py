"""Pytest wiring of the authorization matrix.

One test per (row, served version), a shared environment per worker, and a summary of every cell with its
denial text at the end of the run.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance import paths
from dra_conformance.errors import FixtureError
from dra_conformance.exits import refuse
from dra_conformance.kube.leaks import audit_namespace
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.rbac.environment import RbacEnvironment, served_resource_versions
from dra_conformance.rbac.matrix import VERSIONED_ACTIONS, Row, load_rows
from dra_conformance.rbac.read_allowlist import DEFAULTS_FILE, Allowlist
from dra_conformance.rbac.read_allowlist import load as load_allowlist
from dra_conformance.timeouts import Timeouts

ROWS_KEY = pytest.StashKey[list[Row]]()
ALLOWLIST_KEY = pytest.StashKey[Allowlist]()
# Every version resource.k8s.io has had in 1.3x; cells of versions a cluster does not serve are skipped.
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The authorization matrix file."""
    group = parser.getgroup("dra-conformance-rbac")
    group.addoption(
        "--dra-rbac-matrix", type=Path, default=None, help="authorization matrix (default fixtures/rbac/matrix.yaml)"
    )
    group.addoption(
        "--dra-read-allowlist",
        type=Path,
        default=None,
        metavar="FILE",
        help="YAML file of the subjects allowed to read ResourceClaims beyond their own namespace (adds to the "
        f"built-in control-plane entries of {DEFAULTS_FILE.name}, printed by `python -m "
        "dra_conformance.rbac.read_allowlist`; `builtIn: false` replaces them)",
    )


def load_matrix(config: pytest.Config) -> None:
    """Validate the matrix once per process (the session does it before any cluster starts)."""
    path = config.getoption("--dra-rbac-matrix") or paths.rbac_matrix()
    try:
        config.stash[ROWS_KEY] = load_rows(path)
    except FixtureError as error:
        refuse(error)


def load_read_allowlist(config: pytest.Config) -> None:
    """Validate the read-exposure allowlist once per process (before any cluster starts); a bad file is one line."""
    try:
        config.stash[ALLOWLIST_KEY] = load_allowlist(config.getoption("--dra-read-allowlist"))
    except FixtureError as error:
        refuse(error)


@pytest.fixture(scope="session")
def read_allowlist(conformance_run: None, pytestconfig: pytest.Config) -> Allowlist:
    """The allowlist of the read-exposure check (the file of --dra-read-allowlist, else the built-in one)."""
    if ALLOWLIST_KEY not in pytestconfig.stash:
        load_read_allowlist(pytestconfig)
    return pytestconfig.stash[ALLOWLIST_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `cell` as (row, version) with ids identity/action/target/version."""
    if "cell" not in metafunc.fixturenames:
        return
    cells = [
        (row, version)
        for row in metafunc.config.stash[ROWS_KEY]
        for version in (RESOURCE_VERSIONS if row.action in VERSIONED_ACTIONS else (None,))
    ]
    metafunc.parametrize("cell", cells, ids=[row.cell_id(version) for row, version in cells])


@pytest.fixture(scope="session")
def served_versions(api_client: client.ApiClient) -> list[str]:
    """Served versions of resource.k8s.io."""
    return served_resource_versions(api_client)


@pytest.fixture(scope="session")
def rbac_environment(
    api_client: client.ApiClient,
    dynamic_client: DynamicClient,
    cluster: ClusterInfo,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
    run_id: str,
) -> Iterator[RbacEnvironment]:
    """Identities and targets shared by this worker's matrix cells; removed (and audited) afterwards."""
    if len(cluster.nodes) < 2:
        pytest.skip("not applicable: the authorization matrix needs two nodes")
    suffix = secrets.token_hex(3)
    namespaces = (f"rbac-{suffix}", f"rbac-tenant-{suffix}")
    for name in namespaces:
        create_namespace(api_client, name, run_id, timeouts.namespace_ready)
    tracker = ResourceTracker(dynamic_client, delete_timeout=timeouts.delete)
    environment = None
    try:
        environment = RbacEnvironment(api_client, tracker, cluster, namespaces, timeouts)
        yield environment
        persisted = environment.persisted_writes()
        assert not persisted, f"matrix writes must be dry-runs, but these claims changed: {persisted}"
    finally:
        if environment is not None:
            environment.close()
        tracker.cleanup()
        for name in namespaces:
            audit_namespace(dynamic_client, name, timeouts.delete)
            namespace_reaper.delete(name)

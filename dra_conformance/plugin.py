"""The pytest plugin: options, markers, report locations, and the cluster, client and namespace fixtures.

One cluster per run, shared by all xdist workers: the first worker to need it starts it under a file lock,
the others attach. The controller process owns it: the supervisor stops the cluster when the controller exits,
and the controller stops it explicitly at session end unless `--keep-cluster` is given.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance import catalog
from dra_conformance.backends.base import ClusterBackend, ClusterInfo
from dra_conformance.backends.local.backend import repository_root
from dra_conformance.backends.registry import make_backend
from dra_conformance.config import BACKENDS, METRICS_IMPLEMENTATIONS, SuiteConfig
from dra_conformance.errors import ConformanceError, FixtureError, UsageError
from dra_conformance.kube import client_from_kubeconfig
from dra_conformance.leaks import audit_namespace
from dra_conformance.namespaces import NamespaceReaper, create_namespace
from dra_conformance.timeouts import Timeouts
from dra_conformance.tracker import ResourceTracker

_RUN_ID_KEY = pytest.StashKey[str]()
_OWNER_PID_KEY = pytest.StashKey[int]()
_SUITE_CONFIG_KEY = pytest.StashKey[SuiteConfig]()
RUN_DIR_KEY = pytest.StashKey[Path]()
CATALOG_KEY = pytest.StashKey[list[catalog.Scenario]]()  # validated once per process


def _timeout_option(name: str) -> str:
    return "--dra-timeout-" + name.replace("_", "-")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite's options in one group."""
    group = parser.getgroup("dra-conformance", "DRA conformance")
    group.addoption(
        "--cluster",
        choices=BACKENDS,
        default="local",
        help="cluster backend: local (embedded, default) or existing (needs --kubeconfig)",
    )
    group.addoption("--kubeconfig", type=Path, default=None, help="kubeconfig of an existing cluster")
    group.addoption("--context", default=None, help="kubeconfig context (default: current context)")
    group.addoption("--nodes", type=int, default=SuiteConfig.nodes, help="fake nodes of a local cluster")
    group.addoption(
        "--cluster-state-dir",
        type=Path,
        default=None,
        help="state directory of the local cluster (default reports/clusters/local)",
    )
    group.addoption(
        "--metrics-implementation",
        choices=METRICS_IMPLEMENTATIONS,
        default="fake",
        help="Metrics API of a local cluster: fake (reference adapter, v1+v1beta1), metrics-server, none",
    )
    group.addoption("--keep-cluster", action="store_true", help="leave a cluster this run started running")
    group.addoption(
        "--keep-resources",
        action="store_true",
        help="do not delete what tests created (debugging; leaks are then expected)",
    )
    group.addoption("--audit-log", type=Path, default=None, help="kube-apiserver audit log of an existing cluster")
    group.addoption(
        "--catalog",
        type=Path,
        default=None,
        help="scenario catalog directory (default fixtures/scenarios in the checkout)",
    )
    group.addoption("--reports-dir", type=Path, default=None, help="report root (default <rootdir>/reports)")
    for name in Timeouts.names():
        group.addoption(
            _timeout_option(name),
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"override the {name} deadline (default {getattr(Timeouts(), name):g}s)",
        )


def _suite_config(config: pytest.Config) -> SuiteConfig:
    overrides = {
        name: value for name in Timeouts.names() if (value := config.getoption(_timeout_option(name))) is not None
    }
    bad = [f"{_timeout_option(name)}={value}" for name, value in overrides.items() if value <= 0]
    if bad:
        raise pytest.UsageError(f"timeouts must be positive: {', '.join(bad)}")
    nodes = config.getoption("--nodes")
    if nodes < 1:
        raise pytest.UsageError(f"--nodes must be at least 1, got {nodes}")
    suite = SuiteConfig(
        backend=config.getoption("--cluster"),
        kubeconfig=config.getoption("--kubeconfig"),
        context=config.getoption("--context"),
        nodes=nodes,
        state_dir=config.getoption("--cluster-state-dir"),
        keep_cluster=config.getoption("--keep-cluster"),
        metrics=config.getoption("--metrics-implementation"),
        audit_log=config.getoption("--audit-log"),
        timeouts=Timeouts().override(**overrides),
    )
    try:
        make_backend(suite)  # validates the backend's own inputs (kubeconfig, context) without side effects
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None
    return suite


def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> None:
    # pytest turns KeyboardInterrupt into an orderly session end, which stops the cluster this run started.
    raise KeyboardInterrupt


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Validate options, fix the run id, and point JUnit and Allure output at reports/<run-id>/."""
    config.addinivalue_line("markers", "capability(name): skip unless the cluster/driver has this capability")
    config.addinivalue_line(
        "markers", "scenarios(needs_prepare=False): parametrize the test's `scenario` argument over the catalog"
    )
    catalog_dir = config.getoption("--catalog") or repository_root() / "fixtures" / "scenarios"
    try:
        config.stash[CATALOG_KEY] = catalog.load(catalog_dir)
    except FixtureError as error:
        raise pytest.UsageError(str(error)) from None
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id, owner_pid = workerinput["dra_run_id"], workerinput["dra_owner_pid"]
    else:
        run_id, owner_pid = _new_run_id(), os.getpid()
    config.stash[_RUN_ID_KEY] = run_id
    config.stash[_OWNER_PID_KEY] = owner_pid
    config.stash[_SUITE_CONFIG_KEY] = _suite_config(config)
    reports = config.getoption("--reports-dir") or Path(str(config.rootpath)) / "reports"
    run_dir = reports / run_id
    config.stash[RUN_DIR_KEY] = run_dir
    if config.getoption("collectonly"):
        return  # listing tests writes no reports and starts nothing
    if workerinput is None:
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not config.option.xmlpath:
            config.option.xmlpath = str(run_dir / "junit.xml")
    if hasattr(config.option, "allure_report_dir") and not config.option.allure_report_dir:
        config.option.allure_report_dir = str(run_dir / "allure-results")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand the controller's run id and pid to each xdist worker (the pid owns the cluster)."""
    node.workerinput["dra_run_id"] = node.config.stash[_RUN_ID_KEY]
    node.workerinput["dra_owner_pid"] = node.config.stash[_OWNER_PID_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `scenario` arguments over the validated catalog, with the scenario ids as test ids."""
    if "scenario" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("scenarios")
    options = marker.kwargs if marker else {}
    loaded = metafunc.config.stash[CATALOG_KEY]
    scenarios = catalog.select(loaded, needs_prepare=bool(options.get("needs_prepare", False)))
    metafunc.parametrize("scenario", scenarios, ids=str)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which cluster and which report directory this run uses."""
    if _SUITE_CONFIG_KEY not in config.stash:
        return []
    suite = config.stash[_SUITE_CONFIG_KEY]
    where = f", kubeconfig {suite.kubeconfig}" if suite.kubeconfig else ""
    return [f"dra-conformance: run {config.stash[_RUN_ID_KEY]}, backend {suite.backend}{where}"]


def _backend(config: pytest.Config) -> ClusterBackend:
    suite = config.stash[_SUITE_CONFIG_KEY]
    return make_backend(suite, owner_pid=None if suite.keep_cluster else config.stash[_OWNER_PID_KEY])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controller: stop the cluster if this run started it (workers never stop it)."""
    config = session.config
    if hasattr(config, "workerinput") or _SUITE_CONFIG_KEY not in config.stash:
        return
    if config.stash[_SUITE_CONFIG_KEY].keep_cluster:
        return
    try:
        _backend(config).release(config.stash[_OWNER_PID_KEY])
    except ConformanceError as error:
        config.get_terminal_writer().line(f"dra-conformance: {error}", red=True)


# --- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def suite_config(pytestconfig: pytest.Config) -> SuiteConfig:
    """The run's settings."""
    return pytestconfig.stash[_SUITE_CONFIG_KEY]


@pytest.fixture(scope="session")
def run_dir(pytestconfig: pytest.Config) -> Path:
    """reports/<run-id>/ of this run (shared by all workers)."""
    return pytestconfig.stash[RUN_DIR_KEY]


@pytest.fixture(scope="session")
def run_id(pytestconfig: pytest.Config) -> str:
    """Identifier of this run, shared by all workers; also labels every namespace the run creates."""
    return pytestconfig.stash[_RUN_ID_KEY]


@pytest.fixture(scope="session")
def timeouts(suite_config: SuiteConfig) -> Timeouts:
    """The run's named deadlines."""
    return suite_config.timeouts


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> ClusterInfo:
    """The cluster under test: started (local) or attached (existing) once per run."""
    try:
        return _backend(pytestconfig).start()
    except ConformanceError as error:
        pytest.fail(f"dra-conformance: {error}", pytrace=False)


@pytest.fixture(scope="session")
def api_client(cluster: ClusterInfo, suite_config: SuiteConfig) -> Iterator[client.ApiClient]:
    """An admin ApiClient of the official `kubernetes` package."""
    context = suite_config.context if cluster.backend == "existing" else None
    with client_from_kubeconfig(cluster.kubeconfig, context) as api:
        yield api


@pytest.fixture(scope="session")
def dynamic_client(api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> DynamicClient:
    """A dynamic client (discovery cached in the session's temp dir, not in /tmp)."""
    return DynamicClient(api_client, cache_file=str(tmp_path_factory.mktemp("discovery") / "cache.json"))


def _namespace_name(nodeid: str) -> str:
    test = re.sub(r"[^a-z0-9]+", "-", nodeid.split("::")[-1].lower()).strip("-")
    return f"{test[:40].rstrip('-')}-{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def namespace_reaper(api_client: client.ApiClient, timeouts: Timeouts) -> Iterator[NamespaceReaper]:
    """Session-wide owner of test namespace deletion (see `NamespaceReaper`)."""
    reaper = NamespaceReaper(client.CoreV1Api(api_client), timeouts.delete)
    yield reaper
    reaper.wait_all()


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest,
    api_client: client.ApiClient,
    run_id: str,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[str]:
    """A fresh namespace for one test, with its default ServiceAccount; deleted afterwards."""
    name = _namespace_name(request.node.nodeid)
    try:
        create_namespace(api_client, name, run_id, timeouts.namespace_ready)
        yield name
    finally:
        if not request.config.getoption("--keep-resources"):
            namespace_reaper.delete(name)


@pytest.fixture
def tracker(
    request: pytest.FixtureRequest, dynamic_client: DynamicClient, namespace: str, timeouts: Timeouts
) -> Iterator[ResourceTracker]:
    """Creates objects for the test and deletes them (newest first, awaited) before its namespace goes."""
    keep = request.config.getoption("--keep-resources")
    resources = ResourceTracker(dynamic_client, delete_timeout=timeouts.delete, keep=keep)
    yield resources
    resources.cleanup()
    if not keep:
        audit_namespace(dynamic_client, namespace, timeouts.delete)

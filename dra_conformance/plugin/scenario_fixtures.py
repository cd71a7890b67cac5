"""Scenario catalog wiring: the `--dra-catalog` option, `scenario` parametrization, and the `scenario_run` fixture.

Where does a scenario run? For the reference driver, against an instance of its own (exact device counts, faults
that stay private). For any other driver under test, on one node of that driver which the test leases: one of the
backend's set-aside nodes, which no other test's pod lands on, or on a cluster this suite did not build, one of
the nodes the driver publishes devices for. A scenario whose needs the driver does not meet is not applicable,
with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance import paths
from dra_conformance.driver.lease import NodeLeases
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.reference import FakeDriverControl, PrivateDriver
from dra_conformance.driver.under_test import REAL_NODES_ONLY, DriverUnderTest
from dra_conformance.errors import FixtureError
from dra_conformance.exits import refuse
from dra_conformance.kube.builders import Manifest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import SET_ASIDE_TOLERATION, ClusterInfo
from dra_conformance.model.masking import ObservedMask
from dra_conformance.scenarios import catalog
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.scenarios.runner import ScenarioRun, ScenarioTarget
from dra_conformance.timeouts import Timeouts

CATALOG = pytest.StashKey[Iterable[Scenario]]()  # validated once per process


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dra-catalog."""
    parser.getgroup("dra-conformance-scenarios").addoption(
        "--dra-catalog",
        type=Path,
        default=None,
        help="scenario catalog directory (default: the bundled fixtures/scenarios)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the `scenarios` marker."""
    config.addinivalue_line(
        "markers",
        "scenarios(needs_prepare=False, own_obligation=None): parametrize the test's `scenario` argument over the "
        "catalog (own_obligation: only the scenarios that name an obligation of their own, True, or none, False)",
    )


def load_catalog(config: pytest.Config) -> None:
    """Validate the catalog once per process (the session does it before any cluster starts)."""
    try:
        config.stash[CATALOG] = catalog.load(config.getoption("--dra-catalog") or paths.scenario_catalog())
    except FixtureError as error:
        refuse(error)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `scenario` arguments over the validated catalog, with the scenario ids as test ids."""
    if "scenario" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("scenarios")
    options = marker.kwargs if marker else {}
    scenarios = catalog.select(
        metafunc.config.stash[CATALOG],
        needs_prepare=bool(options.get("needs_prepare", False)),
        own_obligation=options.get("own_obligation"),
    )
    # A scenario that needs a capability exercises it: the certification summary counts it for that capability.
    params = [
        pytest.param(s, marks=pytest.mark.capability(*(str(c) for c in s.capabilities)), id=str(s)) for s in scenarios
    ]
    metafunc.parametrize("scenario", params)


@pytest.fixture
def scenario_node(
    request: pytest.FixtureRequest, node_leases: Path, timeouts: Timeouts
) -> Iterator[Callable[[str, tuple[str, ...]], str]]:
    """Leases one node of a pool for the test, on first use.

    Set up before the test's tracker, so the lease is released only after the scenario's objects are gone.
    """
    with ExitStack() as held:

        def lease(pool: str, nodes: tuple[str, ...]) -> str:
            leases = NodeLeases(node_leases, pool, nodes)
            return held.enter_context(leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid))

        yield lease


def shared_target(
    purpose: str,
    *,
    needs_prepare: bool,
    cluster: ClusterInfo,
    driver: DriverUnderTest,
    api_client: client.ApiClient,
    lease: Callable[[str, tuple[str, ...]], str],
) -> ScenarioTarget:
    """A leased node of the driver under test, checked to publish the devices its profile declares."""
    if driver.profile.real_nodes_only and driver.hold is None:
        pytest.skip(REAL_NODES_ONLY)
    tolerations: tuple[Manifest, ...] = ()
    # The driver's sockets on every node, the set-aside ones included (DriverUnderTest leaves those out).
    endpoints = {e.node: e for e in cluster.drivers if e.driver == driver.name}
    if driver.hold is not None:
        # The driver's nodes with real kubelets (a cluster the suite did not build, whose sockets node agents
        # reach, or the local backend's real nodes for a driver that runs there only). Leased as kubelet-mode
        # checks lease them; the scenario's pods are held there (`PodHold`).
        pool, nodes, tolerations, endpoints = "real", tuple(driver.endpoints), driver.hold.tolerations, driver.endpoints
    elif cluster.set_aside_nodes:
        pool, nodes, tolerations = "set-aside", cluster.set_aside_nodes, (SET_ASIDE_TOLERATION,)
    else:
        pool, nodes = "driver-nodes", tuple(n for n in cluster.nodes if node_pools(api_client, driver.name, n))
    if needs_prepare:
        nodes = tuple(n for n in nodes if n in endpoints)
        if not nodes:
            pytest.skip(
                f"not applicable: backend {cluster.backend} cannot reach a kubelet-plugin socket of {driver.name} "
                f"from this machine, and this check plays the kubelet"
            )
    if not nodes:
        pytest.skip(f"not applicable: no schedulable node of the cluster publishes devices of {driver.name}")
    node = lease(pool, nodes)
    pools = node_pools(api_client, driver.name, node)
    published = sum(len(p.devices) for p in pools.values() if p.complete)
    declared = driver.profile.devices.per_node
    if published != declared:
        pytest.fail(
            f"{purpose}: {driver.name} publishes {published} devices in complete pools on {node}; its "
            f"profile declares {declared}: {[p.describe() for p in pools.values()] or 'no pool'}",
            pytrace=False,
        )
    endpoint = endpoints.get(node)
    # The reference driver's image as installed answers its fault switches; the scenario's fault is undone after.
    control = FakeDriverControl(endpoint) if driver.profile.fault_switches and endpoint is not None else None
    return ScenarioTarget(driver.name, node, declared, endpoint, control, tolerations, driver.hold, shared=True)


@pytest.fixture
def device_target(
    scenario_node: Callable[[str, tuple[str, ...]], str],
    private_driver: Callable[..., PrivateDriver],
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    driver_under_test: DriverUnderTest,
) -> Callable[..., ScenarioTarget]:
    """Returns, on each call, devices of the driver under test on one node that only this test uses.

    The reference driver: a private instance of device profile `profile` with `devices` devices and extra `args`.
    Any other driver: a leased node of it (`purpose` names the checks in a failure; `needs_prepare` asks for a
    node whose kubelet-plugin sockets this machine reaches). A test asks for this before `kubelet`, so the
    kubelet's leftover unprepares run while a private driver is still there.
    """

    def target(
        purpose: str, *, devices: int, profile: str = "gpu", args: tuple[str, ...] = (), needs_prepare: bool = False
    ) -> ScenarioTarget:
        if driver_profile.declares(Capability.REFERENCE_FAULTS):
            driver = private_driver(profile=profile, devices=devices, args=args)
            node, process = next(iter(driver.processes.items()))
            return ScenarioTarget(driver.name, node, devices, process.endpoint, process.control)
        return shared_target(
            purpose,
            needs_prepare=needs_prepare,
            cluster=cluster,
            driver=driver_under_test,
            api_client=api_client,
            lease=scenario_node,
        )

    return target


@pytest.fixture
def scenario_run(
    request: pytest.FixtureRequest,
    device_target: Callable[..., ScenarioTarget],
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
    driver_profile: DriverProfile,
    observed_mask: ObservedMask,
) -> Iterator[Callable[[Scenario], ScenarioRun]]:
    """Deploys a scenario; afterwards attaches its correlation record to Allure and the JUnit properties.

    The record quotes the claims' status.devices: it is masked before it is written (`--dra-no-mask` keeps it).

    It asks for `device_target` (so `private_driver`) before `kubelet`, so the kubelet's leftover unprepares run
    while the driver is still there.
    """
    runs: list[ScenarioRun] = []
    marker = request.node.get_closest_marker("scenarios")
    needs_prepare = bool(marker and marker.kwargs.get("needs_prepare", False))

    def deploy(scenario: Scenario) -> ScenarioRun:
        reason = scenario.not_applicable(driver_profile)
        if reason:
            pytest.skip(f"not applicable: {reason}")
        scenario = scenario.for_profile(driver_profile)  # its profile placeholders filled in
        target = device_target(
            f"scenario {scenario.id}", devices=scenario.devices, profile=scenario.profile, needs_prepare=needs_prepare
        )
        if scenario.fault and target.control is None:
            pytest.skip(
                f"not applicable: scenario {scenario.id} switches a fault, and no control socket of {target.driver} "
                f"on {target.node} is reachable from here"
            )
        run = ScenarioRun(
            scenario, target=target, tracker=tracker, api_client=api_client, namespace=namespace, timeouts=timeouts
        )
        runs.append(run)
        with allure.step(f"deploy scenario {scenario.id} on {target.node}: {scenario.description}"):
            return run.deploy()

    yield deploy
    for run in runs:
        run.undo_fault()
        record = observed_mask(run.finish_record()).to_json()
        allure.attach(record, "correlation record", allure.attachment_type.JSON)
        request.node.user_properties.append(("correlation", record))

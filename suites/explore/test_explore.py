"""The model-based explorer (issue 43): random sequences of kubelet and node operations, the contract after each one.

Nobody wrote these sequences down. Hypothesis draws them (claims of random shapes allocated by the real scheduler,
some mixing in another driver's devices, prepares and unprepares alone, batched and concurrent, repeated prepares,
driver restarts by SIGKILL and SIGTERM, some while pods end (their claims unprepared once the driver is back), a
wiped CDI dir, node reboots, republished pools, deleted claims, rolling updates where the profile declares them,
prepares of claims this node does not own (unknown, deleted, allocated to another node), reads of the health stream
where the profile declares it, devices failed and restored through its health hooks, claims carrying its opaque
config samples) on a
set-aside node of the driver under test, where the suite plays the kubelet, and checks the invariants of
`dra_conformance/model/registry/explore.yaml` after every step. A finding is shrunk to the shortest sequence that
still breaks it and reported with its seed; `dra-conformance explore --profile P --replay SEED` runs it again.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance.driver import health_hook
from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.profile import render as fill_in
from dra_conformance.driver.reference import reference_program
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import UsageError
from dra_conformance.explore import RECORD_KIND
from dra_conformance.explore.cluster import ClusterWorld, HealthHook, SecondInstance
from dra_conformance.explore.invariants import HARNESS
from dra_conformance.explore.runner import Budget, Exploration, explore, render
from dra_conformance.explore.world import HarnessProblem
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.latency import LatencyLog
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.model.obligations import Basis
from dra_conformance.model.records import RunRecords
from dra_conformance.timeouts import Timeouts

# Every step talks to the driver's sockets: not applicable where this machine cannot reach them.
pytestmark = pytest.mark.usefixtures("driver_sockets")

# Seeds are 32-bit, as Hypothesis prints them.
SEED_BITS = 32


def run_seed(config: pytest.Config, run_id: str) -> int:
    """The seed given (--dra-explore-seed), else one derived from the run's id: each run explores anew, and says how."""
    given = config.getoption("--dra-explore-seed", None)
    if given is not None:
        return int(given)
    return int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % (1 << SEED_BITS)


def budget_of(config: pytest.Config) -> Budget:
    """The budget the options give (0 seconds: no time limit, as for a replay)."""
    seconds = float(config.getoption("--dra-explore-seconds", 60.0))
    return Budget(
        max_examples=int(config.getoption("--dra-explore-max-examples", 50)),
        max_steps=int(config.getoption("--dra-explore-max-steps", 12)),
        seconds=seconds if seconds > 0 else None,
        shrink_seconds=float(config.getoption("--dra-explore-shrink-seconds", 60.0)),
    )


def second_instance_of(profile: DriverProfile, cluster: ClusterInfo, disruption: Disruption) -> SecondInstance | None:
    """How to start a new instance of a rolling update beside the driver: its profile's command line, an instance UID.

    Only for the reference driver (referenceFaults) where the backend runs its build on this machine: the instance
    UID is its `--rolling-update-uid`, as its DaemonSet passes the pod's UID. None elsewhere (the explorer says why).
    """
    declared = profile.declares(Capability.ROLLING_UPDATE) and profile.declares(Capability.REFERENCE_FAULTS)
    if not declared or profile.run is None or BackendCapability.REFERENCE_DRIVER not in cluster.capabilities:
        return None
    endpoint, program, args = disruption.endpoint, reference_program(cluster.details), profile.run.process.args
    kubeconfig = disruption.processes.driver_kubeconfig(disruption.node)

    def argv(instance: str, state_dir: Path) -> list[str]:
        values = {
            "driver": profile.driver,
            "node": disruption.node,
            "kubeconfig": str(kubeconfig),
            "kubelet_root": str(endpoint.kubelet_root),
            "registrar_dir": str(endpoint.registrar_dir),
            "plugins_dir": str(endpoint.plugins_dir),
            "socket_path": str(endpoint.plugins_dir / "dra.sock"),
            "cdi_dir": str(endpoint.cdi_dir),
            "data_dir": str(state_dir),
            "python": sys.executable,
            "devices": str(profile.devices.per_node),
        }
        return [*program, *(fill_in(arg, values) for arg in args), f"--rolling-update-uid={instance}"]

    return argv


def health_hook_of(profile: DriverProfile, cluster: ClusterInfo, disruption: Disruption) -> HealthHook | None:
    """The profile's health hooks for one device of the explorer's node, where declared and runnable here.

    Runnable: every placeholder has a value on this machine. None elsewhere (the explorer says why).
    """
    hooks = profile.health
    if hooks is None or not profile.declares(Capability.HEALTH_STREAM):
        return None

    def values(device: tuple[str, str]) -> dict[str, str]:
        return health_hook.hook_values(profile, disruption.endpoint, device[1], device[0], cluster.details)

    try:
        for hook in (hooks.make_unhealthy, hooks.make_healthy):
            health_hook.render_all(hook, values(("pool", "device")))
    except UsageError:
        return None

    def run(device: tuple[str, str], healthy: bool) -> str | None:
        return health_hook.run(hooks.make_healthy if healthy else hooks.make_unhealthy, values(device))

    return run


def audit_of(cluster: ClusterInfo, profile: DriverProfile) -> tuple[Path, str] | None:
    """The API server's audit log and the user the driver writes as, where this machine reads the log."""
    if cluster.audit_log is None:
        return None
    return cluster.audit_log, profile.identity.service_account.username


def reproduce_command(profile: str, seed: int, budget: Budget) -> str:
    """The command that runs this exploration's seed again."""
    return (
        f"dra-conformance explore --profile {profile} --replay {seed} --max-examples {budget.max_examples} "
        f"--max-steps {budget.max_steps}"
    )


def test_the_driver_keeps_the_contract_through_random_sequences_of_kubelet_and_node_operations(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    other_driver: tuple[str, str] | None,
    driver_client: Callable[[DriverEndpoint], DriverClient],
    latency_log: LatencyLog,
    timeouts: Timeouts,
    run_id: str,
    run_records: RunRecords,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    profile = driver_under_test.profile
    where = f"the explorer on {disruption.node}"
    try:
        world = ClusterWorld(
            disruption,
            driver_under_test.name,
            tracker,
            build,
            api_client,
            device_class,
            driver_client,
            latency_log,
            timeouts,
            admin_access=profile.declares(Capability.ADMIN_ACCESS),
            republish=profile.declares(Capability.REFERENCE_FAULTS),
            other=other_driver,
            rolling_update=profile.declares(Capability.ROLLING_UPDATE),
            second_instance=second_instance_of(profile, cluster, disruption),
            status_devices=profile.declares(Capability.STATUS_DEVICES),
            declared_attributes={name: str(kind) for name, kind in profile.devices.attributes.items()},
            health_stream=profile.declares(Capability.HEALTH_STREAM),
            health_hook=health_hook_of(profile, cluster, disruption),
            opaque_config=profile.opaque_config,
            audit=audit_of(cluster, profile),
        )
    except HarnessProblem as problem:
        obligations.fail(HARNESS, str(problem), where)
    seed, budget = run_seed(pytestconfig, run_id), budget_of(pytestconfig)

    def fails(obligation: str) -> bool:
        basis = obligations.registry[obligation].basis
        return basis == Basis.CONTRACT or (basis == Basis.DEFENSIVE and obligations.strict)

    try:
        exploration = explore(world, budget, seed, fails)
    finally:
        left = world.close()
    reproduce = reproduce_command(str(profile.source), seed, budget)
    lines = render(exploration, reproduce)
    record = {"check": request.node.nodeid, "node": disruption.node, "reproduce": reproduce, "lines": lines}
    run_records.add(RECORD_KIND, record | exploration.to_json())
    allure.attach("\n".join(lines), name="exploration", attachment_type=allure.attachment_type.TEXT)
    _judge(exploration, lines, obligations, where)
    obligations.check(HARNESS, not left, f"claims left prepared: {left}", where)


def _judge(exploration: Exploration, lines: list[str], obligations: Obligations, where: str) -> None:
    """Every obligation the exploration checked goes to the run's verdicts: held, an advisory, or the finding."""
    broken = {v.obligation for v in exploration.advisories}
    if exploration.finding is not None:
        broken.add(exploration.finding.violation.obligation)
    for obligation in exploration.exercised:
        if obligation not in broken:
            obligations.check(obligation, True, "held", where)
    for advisory in exploration.advisories:
        obligations.check(advisory.obligation, False, advisory.observed, f"{where}, {advisory.where}")
    if exploration.finding is not None:
        violation = exploration.finding.violation
        observed = "\n".join([violation.observed, *(f"  {line}" for line in lines)])
        obligations.check(violation.obligation, False, observed, f"{where}, {violation.where}")
    if exploration.harness is not None:
        obligations.fail(HARNESS, exploration.harness, where)
    obligations.check(HARNESS, exploration.steps > 0, "no operation ran within the budget", where)

"""The `scenario_run` fixture: a catalog scenario deployed against its own reference driver instance."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import allure
import pytest
from kubernetes import client

from dra_conformance.catalog import Scenario
from dra_conformance.driver_fixtures import KubeletRole, PrivateDriver
from dra_conformance.scenario_runner import ScenarioRun
from dra_conformance.timeouts import Timeouts
from dra_conformance.tracker import ResourceTracker


@pytest.fixture
def scenario_run(
    request: pytest.FixtureRequest,
    private_driver: Callable[..., PrivateDriver],
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> Iterator[Callable[[Scenario], ScenarioRun]]:
    """Deploys a scenario; afterwards attaches its correlation record to Allure and the JUnit properties.

    It asks for `private_driver` before `kubelet`, so the kubelet's leftover unprepares run while the driver is
    still there.
    """
    runs: list[ScenarioRun] = []

    def deploy(scenario: Scenario) -> ScenarioRun:
        driver = private_driver(profile=scenario.profile, devices=scenario.devices)
        run = ScenarioRun(
            scenario, driver=driver, tracker=tracker, api_client=api_client, namespace=namespace, timeouts=timeouts
        )
        runs.append(run)
        with allure.step(f"deploy scenario {scenario.id}: {scenario.description}"):
            return run.deploy()

    yield deploy
    for run in runs:
        record = run.finish_record().to_json()
        allure.attach(record, "correlation record", allure.attachment_type.JSON)
        request.node.user_properties.append(("correlation", record))

"""Scenario catalog wiring: the `--catalog` option, `scenario` parametrization, and the `scenario_run` fixture.

A scenario is deployed against a reference driver instance of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance import paths
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.errors import FixtureError
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.plugin.exits import refuse
from dra_conformance.scenarios import catalog
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.scenarios.runner import ScenarioRun
from dra_conformance.timeouts import Timeouts

CATALOG = pytest.StashKey[Iterable[Scenario]]()  # validated once per process


def pytest_addoption(parser: pytest.Parser) -> None:
    """--catalog."""
    parser.getgroup("dra-conformance").addoption(
        "--catalog",
        type=Path,
        default=None,
        help="scenario catalog directory (default: the bundled fixtures/scenarios)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the `scenarios` marker."""
    config.addinivalue_line(
        "markers", "scenarios(needs_prepare=False): parametrize the test's `scenario` argument over the catalog"
    )


def load_catalog(config: pytest.Config) -> None:
    """Validate the catalog once per process (the session does it before any cluster starts)."""
    try:
        config.stash[CATALOG] = catalog.load(config.getoption("--catalog") or paths.scenario_catalog())
    except FixtureError as error:
        refuse(error)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `scenario` arguments over the validated catalog, with the scenario ids as test ids."""
    if "scenario" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("scenarios")
    options = marker.kwargs if marker else {}
    scenarios = catalog.select(metafunc.config.stash[CATALOG], needs_prepare=bool(options.get("needs_prepare", False)))
    metafunc.parametrize("scenario", scenarios, ids=str)


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

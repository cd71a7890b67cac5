"""Options and fixtures of the rollback rehearsal (suites/rollback).

`--dra-rollback-phase all` (the default) runs every phase in one run, and the suite makes the change and the
rollback itself. A single phase (`--dra-rollback-phase before|after_change|after_rollback`) needs the state file the
user names with `--dra-rollback-state`; between phases the staging team changes the cluster, or lets the suite do it
with `--dra-rollback-drive`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.errors import UsageError
from dra_conformance.exits import refuse
from dra_conformance.kube.namespaces import NamespaceReaper
from dra_conformance.plugin.options import option_or
from dra_conformance.rollback import metrics_rehearsal as metrics_rehearsal_mode
from dra_conformance.rollback.state import DEFAULT_REHEARSAL, PHASES, Phase, RehearsalState
from dra_conformance.rollback.steps import DEFAULT_RESOURCE, Rehearsal, finish, finish_metrics
from dra_conformance.timeouts import Timeouts

ALL_PHASES = "all"
STATE_FILE = "rollback-state.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The rehearsal's options."""
    group = parser.getgroup("dra-conformance-rollback")
    group.addoption(
        "--dra-rollback-phase",
        choices=(ALL_PHASES, *(str(p) for p in PHASES)),
        default=None,
        help="rollback rehearsal phase to run (default all, in one run, the suite changing and rolling back)",
    )
    group.addoption(
        "--dra-rollback-state",
        type=Path,
        default=None,
        help="rehearsal state file a later phase compares against (needed with a single --dra-rollback-phase)",
    )
    group.addoption(
        "--dra-rollback-drive",
        action="store_true",
        help="with a single phase: the suite makes the change (after_change) or the rollback (after_rollback)",
    )
    group.addoption(
        "--dra-rollback-resource",
        default=None,
        help=f"extended resource the device plugin serves and DRA takes over (default {DEFAULT_RESOURCE})",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the phase marker; a single phase without a state file is a usage error."""
    config.addinivalue_line("markers", "rollback_phase(name): the rollback rehearsal phase a test runs")
    phase = option_or(config, "--dra-rollback-phase", ALL_PHASES)
    if phase == ALL_PHASES:
        return
    path = config.getoption("--dra-rollback-state")
    if path is None:
        refuse(
            UsageError(f"--dra-rollback-phase {phase} needs --dra-rollback-state FILE (the state earlier phases wrote)")
        )
    try:
        state = RehearsalState.load(path)
        index = PHASES.index(Phase(phase))
        if index > 0:
            state.require_any(Phase(phase), PHASES[index - 1])
    except UsageError as error:
        refuse(error)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a single phase chosen, deselect the other phases' tests."""
    chosen = option_or(config, "--dra-rollback-phase", ALL_PHASES)
    if chosen == ALL_PHASES:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("rollback_phase")
        (drop if marker is not None and marker.args[0] != chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _rehearsal_of_run(pytestconfig: pytest.Config, run_dir: Path, name: str) -> Rehearsal:
    """Rehearsal `name` as this run's options ask: one phase against the named state file, or every phase at once.

    A single phase's file was checked when the run was configured; with every phase, the file is the run's own.
    """
    single = option_or(pytestconfig, "--dra-rollback-phase", ALL_PHASES) != ALL_PHASES
    state = RehearsalState.load(pytestconfig.getoption("--dra-rollback-state") or run_dir / STATE_FILE, name)
    drive = not single or pytestconfig.getoption("--dra-rollback-drive")
    resource = option_or(pytestconfig, "--dra-rollback-resource", DEFAULT_RESOURCE)
    return Rehearsal(state, run_dir, drive=drive, single_phase=single, resource=resource)


@pytest.fixture(scope="module")
def rehearsal(
    pytestconfig: pytest.Config,
    run_dir: Path,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[Rehearsal]:
    """The rehearsal of this run; with every phase in one run, torn down at the end whatever happened."""
    found = _rehearsal_of_run(pytestconfig, run_dir, DEFAULT_REHEARSAL)
    try:
        yield found
    finally:
        if not found.single_phase and found.engine is not None and Phase.AFTER_ROLLBACK not in found.state.records:
            finish(found, timeouts, namespace_reaper)


@pytest.fixture(scope="module")
def metrics_rehearsal(
    pytestconfig: pytest.Config,
    run_dir: Path,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[Rehearsal]:
    """The metrics v1 -> v1beta1 rehearsal of this run, its own part of the state file.

    With every phase in one run, a rehearsal that stopped half-way serves v1 again and is torn down at the end.
    """
    found = _rehearsal_of_run(pytestconfig, run_dir, metrics_rehearsal_mode.REHEARSAL)
    try:
        yield found
    finally:
        if not found.single_phase and found.metrics is not None and Phase.AFTER_ROLLBACK not in found.state.records:
            finish_metrics(found, namespace_reaper, restore=True)

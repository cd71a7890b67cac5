"""What a consumer watching the driver's slices sees while the driver republishes its pool.

The scheduler keeps only the slices of a pool's highest generation and treats a pool with fewer of them than
resourceSliceCount says as being updated. A watch of the pool's slices is judged after every event, not only at the
end: the pool should stay complete throughout, and once the new generation is complete no slice of an older one
may remain. Making a driver republish on request needs the reference driver's fault switches (tainting a device
changes what the pool publishes); other drivers offer no generic trigger.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.driver.applicability import require_fault_switches
from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.slice_history import SliceHistory
from dra_conformance.driver.slice_hygiene import PoolView, generation_of, incomplete_moments, pool_views, settled
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts


def _republished(history: SliceHistory, after: int, device: str, tainted: bool) -> dict[str, PoolView] | None:
    """The node's pools once complete at a generation above `after` with `device` tainted as asked, else None."""
    views = pool_views(history.current())
    done = (
        bool(views)
        and all(view.complete and view.generation > after for view in views.values())
        and bool(history.taints_of(device)) == tainted
    )
    return views if done else None


def _wait_republished(history: SliceHistory, after: int, device: str, tainted: bool, timeout: float) -> int | None:
    """The generation the pool is complete at after republishing, or None when the deadline passed first."""
    try:
        views = waits.until(
            lambda: _republished(history, after, device, tainted),
            lambda found: found is not None,
            timeout=timeout,
            what=f"pool republished above generation {after} with {device} {'tainted' if tainted else 'untainted'}",
            describe=lambda _: [view.describe() for view in pool_views(history.current()).values()],
        )
    except WaitTimeout:
        return None
    return None if views is None else max(view.generation for view in views.values())


def test_pool_stays_complete_and_drops_older_generations_while_the_driver_republishes(
    request: pytest.FixtureRequest,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    profile = driver_under_test.profile
    require_fault_switches(profile, "making the driver republish its pool on request")
    disruption: Disruption = request.getfixturevalue("disruption")
    node = disruption.node
    where = f"pool of {driver_under_test.name} on {node}"
    history = SliceHistory(api_client, driver_under_test.name, node).start()
    control = FakeDriverControl(disruption.endpoint)
    try:
        listed = history.current()
        devices = sorted(d["name"] for item in listed for d in item["spec"].get("devices") or [])
        if not devices:
            obligations.fail("slices.republish-precondition", f"no device published; slices {listed}", where)
        start = max(generation_of(item) for item in listed)
        # Tainting a device makes the reference driver republish the pool at a new generation; clearing the fault
        # republishes it again.
        undo = control.set_faults([*control.faults(), {"mode": "unavailable", "device": devices[-1]}])
        try:
            tainted = _wait_republished(history, start, devices[-1], True, timeouts.taint_observed)
        finally:
            undo()
        untainted = _wait_republished(history, tainted or start, devices[-1], False, timeouts.taint_observed)
        # Slices of older generations go once the new one is complete; a republish writes and deletes in one go.
        try:
            waits.until(
                lambda: pool_views(history.current()),
                settled,
                timeout=timeouts.taint_observed,
                what="no slice of an older generation left",
                describe=lambda views: [view.describe() for view in views.values()],
            )
        except WaitTimeout:
            pass  # judged below on what the watch saw
    finally:
        history.stop()
    versions = history.snapshot()
    seen = [f"{kind} {item['metadata']['name']} generation {generation_of(item)}" for kind, item in versions]
    obligations.check(
        "slices.republish-precondition",
        tainted is not None and untainted is not None,
        f"started at generation {start}; settled tainted at {tainted}, untainted at {untainted}; versions {seen}; "
        f"watch error {history.error!r}",
        where,
    )
    moments = incomplete_moments(versions)
    obligations.check("slices.pool-stays-complete-during-republish", not moments, f"{moments}; versions {seen}", where)
    stale = [view.describe() for view in pool_views(history.current()).values() if view.stale]
    obligations.check("slices.older-generations-removed", not stale, f"older generations left: {stale}", where)

"""A device's attributes keep their names and types when its driver publishes the pool again.

Selectors and constraints name attributes and compare them by type (`device.attributes["x"].index > 2`,
`matchAttribute`); an attribute that changes from an int to a string, or disappears, when the driver rescans its
devices silently stops matching, with no new driver version to explain it (issue 43's held-out class: a republish
that changed an attribute's type certified). Every version of the node's slices a watch sees while the driver
republishes is compared with the first: with the reference driver's fault switches (a taint changes what the pool
publishes, and clearing it changes it back), else by restarting the driver, which publishes again for any driver.
The driver's build (its version) does not change during the check.
"""

from __future__ import annotations

from typing import Any

import allure
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.slice_history import LIST_TIMEOUT, SliceHistory
from dra_conformance.driver.slice_hygiene import generation_of, pool_views
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# (pool, device) -> attribute name -> the value's type (int, bool, string, version).
Shapes = dict[tuple[str, str], dict[str, str]]


def _attribute_types(item: dict[str, Any]) -> Shapes:
    pool = item["spec"]["pool"]["name"]
    return {
        (pool, device["name"]): {
            name: ",".join(sorted(value)) for name, value in (device.get("attributes") or {}).items()
        }
        for device in item["spec"].get("devices") or []
    }


def _republished_above(history: SliceHistory, generation: int) -> bool:
    views = pool_views(history.current())
    return bool(views) and all(view.complete and view.generation > generation for view in views.values())


def test_device_attributes_keep_their_names_and_types_across_republishes(
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    node = disruption.node
    where = f"pool of {driver_under_test.name} on {node} (version {driver_under_test.profile.version})"
    history = SliceHistory(api_client, driver_under_test.name, node).start()
    try:
        listed = history.current()
        if not any(item["spec"].get("devices") for item in listed):
            obligations.fail("slices.republish-precondition", f"no device published; slices {listed}", where)
        start = max(generation_of(item) for item in listed)
        if driver_under_test.profile.fault_switches:
            control = FakeDriverControl(disruption.endpoint)
            device = sorted(d["name"] for item in listed for d in item["spec"].get("devices") or [])[-1]
            with allure.step(f"taint {device} and clear it again: the driver republishes twice"):
                undo = control.set_faults([*control.faults(), {"mode": "unavailable", "device": device}])
                try:
                    waits.until(
                        lambda: _republished_above(history, start),
                        bool,
                        timeout=timeouts.taint_observed,
                        what=f"pool republished above generation {start}",
                        describe=lambda _: [view.describe() for view in pool_views(history.current()).values()],
                    )
                except WaitTimeout:
                    pass  # judged below on what the watch saw
                finally:
                    undo()
        with allure.step(f"SIGKILL the driver on {node}, then start it again: it publishes its pool again"):
            disruption.kill()
            disruption.start()  # waits until it registered again with a complete pool
    finally:
        history.stop()
    # The slices as they are after the restart, also where the restarted driver wrote nothing (its pool unchanged).
    group, version = RESOURCE_API.split("/")
    relisted = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=history.selector, _request_timeout=LIST_TIMEOUT
    )["items"]
    versions = [(kind, item) for kind, item in history.snapshot() if kind != "DELETED"]
    versions += [("LISTED-AFTER-RESTART", item) for item in relisted]
    first: Shapes = {}
    changes = []
    for kind, item in versions:
        for key, types in _attribute_types(item).items():
            before = first.setdefault(key, types)
            if types != before:
                changes.append(
                    f"{key[0]}/{key[1]} in {kind} {item['metadata']['name']} generation {generation_of(item)}: "
                    f"{types} (first seen {before})"
                )
    obligations.check(
        "slices.attribute-names-and-types-stable",
        not changes,
        f"{len(changes)} change(s) over {len(versions)} slice versions ({len(listed)} listed at the start, "
        f"{len(relisted)} after the restart; watch error {history.error!r}): {changes[:5]}",
        where,
    )

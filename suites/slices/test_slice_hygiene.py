"""What the driver under test's slices look like to the scheduler, for any driver: read once its pools settled.

A consumer sees a pool through its slices at the highest generation: it is complete when there are as many as
resourceSliceCount says, and a device is known by (driver, pool, name). Slices stay within the API's size limits,
name each device once per pool and each attribute once per device, and a node's slices belong to that Node.
"""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client

from dra_conformance.driver.slice_hygiene import (
    Slice,
    duplicate_attribute_names,
    duplicate_device_names,
    limit_violations,
    name_of,
    owner_problems,
    pool_views,
    single_node_selector,
)
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.nodes import node_uids
from dra_conformance.model.findings import Obligations


def _published(obligations: Obligations, items: list[Slice], where: str) -> None:
    obligations.check("slices.driver-publishes-slices", bool(items), "no ResourceSlice with this driver name", where)


def test_every_slice_stays_within_the_apis_size_limits(
    settled_slices: Callable[[], list[Slice]], driver_under_test: DriverUnderTest, obligations: Obligations
) -> None:
    items = settled_slices()
    where = f"slices of {driver_under_test.name}"
    _published(obligations, items, where)
    problems = [problem for item in items for problem in limit_violations(item)]
    obligations.check("slices.within-size-limits", not problems, f"{problems}; {len(items)} slices read", where)


def test_device_names_are_unique_within_each_pool_across_its_slices(
    settled_slices: Callable[[], list[Slice]], driver_under_test: DriverUnderTest, obligations: Obligations
) -> None:
    items = settled_slices()
    where = f"pools of {driver_under_test.name}"
    _published(obligations, items, where)
    duplicates = duplicate_device_names(items)
    pools = [view.describe() for view in pool_views(items).values()]
    obligations.check("slices.device-names-unique-in-pool", not duplicates, f"{duplicates}; pools {pools}", where)


def test_each_pools_slice_count_matches_its_slices_at_the_current_generation(
    settled_slices: Callable[[], list[Slice]], driver_under_test: DriverUnderTest, obligations: Obligations
) -> None:
    items = settled_slices()
    where = f"pools of {driver_under_test.name}"
    _published(obligations, items, where)
    views = pool_views(items).values()
    wrong = [view.describe() for view in views if not view.complete]
    obligations.check("slices.slice-count-matches-current-generation", not wrong, f"incomplete: {wrong}", where)
    stale = [view.describe() for view in views if view.complete and view.stale]
    obligations.check("slices.older-generations-removed", not stale, f"older generations left: {stale}", where)


def test_node_local_slices_name_their_node_and_are_owned_by_it(
    settled_slices: Callable[[], list[Slice]],
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    obligations: Obligations,
) -> None:
    items = settled_slices()
    where = f"slices of {driver_under_test.name}"
    _published(obligations, items, where)
    # Only the nodes the slices name: the cluster's node list would grow with the cluster, not with the driver.
    nodes = node_uids(
        client.CoreV1Api(api_client), (item["spec"]["nodeName"] for item in items if item["spec"].get("nodeName"))
    )
    problems = [problem for item in items for problem in owner_problems(item, nodes.get(item["spec"].get("nodeName")))]
    problems += [
        f"slice {name_of(item)} pins node {node} through a nodeSelector instead of nodeName"
        for item in items
        if (node := single_node_selector(item)) is not None
    ]
    obligations.check("slices.node-local-pool-owned-by-node", not problems, problems, where)


def test_attribute_names_are_unique_once_qualified_by_the_drivers_domain(
    settled_slices: Callable[[], list[Slice]], driver_under_test: DriverUnderTest, obligations: Obligations
) -> None:
    items = settled_slices()
    where = f"devices of {driver_under_test.name}"
    _published(obligations, items, where)
    problems = [
        f"slice {name_of(item)}: {problem}"
        for item in items
        for device in item["spec"].get("devices") or []
        for problem in duplicate_attribute_names(device, driver_under_test.name)
    ]
    obligations.check("slices.attribute-names-unique-when-qualified", not problems, problems, where)

"""The driver under test's own ResourceSlices, listed by the driver's name (never the whole cluster's)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from dra_conformance.driver.slice_history import LIST_TIMEOUT
from dra_conformance.driver.slice_hygiene import Slice, pool_views, settled
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.timeouts import Timeouts


def driver_slices(api_client: client.ApiClient, driver: str) -> list[Slice]:
    """Every ResourceSlice of `driver` (field selector spec.driver)."""
    group, version = RESOURCE_API.split("/")
    listed = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}", _request_timeout=LIST_TIMEOUT
    )
    return list(listed["items"])


@pytest.fixture
def settled_slices(
    driver_under_test: DriverUnderTest, api_client: client.ApiClient, timeouts: Timeouts
) -> Callable[[], list[Slice]]:
    """The driver's slices once every pool is complete with no older generation left, or as they are at the deadline.

    Another test may be making the driver republish a pool (a restart, a fault) while this one reads: a pool
    caught mid-write is read again until it settles. The deadline is the driver's start-up one, the time it has to
    publish a complete pool; a pool that never settles within it is judged as it was then.
    """

    def read() -> list[Slice]:
        try:
            return waits.until(
                lambda: driver_slices(api_client, driver_under_test.name),
                lambda items: settled(pool_views(items)),
                timeout=timeouts.driver_ready,
                what=f"pools of {driver_under_test.name} settled",
                describe=lambda items: [view.describe() for view in pool_views(items).values()],
            )
        except WaitTimeout:
            return driver_slices(api_client, driver_under_test.name)

    return read

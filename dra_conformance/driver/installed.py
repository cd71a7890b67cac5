"""A driver installed in a cluster we did not build: whether it is there at all, as its profile says."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import UsageError
from dra_conformance.kube.builders import RESOURCE_API

# Two reads the API server answers from its watch cache.
REQUEST_TIMEOUT = 10.0


def check_installed(api: client.ApiClient, profile: DriverProfile) -> None:
    """Raise a one-line UsageError when the driver publishes no ResourceSlice or an expected DeviceClass is missing."""
    group, version = RESOURCE_API.split("/")
    objects = client.CustomObjectsApi(api)
    where = f"{profile.source}: driver {profile.driver}"
    slices = objects.list_cluster_custom_object(
        group,
        version,
        "resourceslices",
        field_selector=f"spec.driver={profile.driver}",
        _request_timeout=REQUEST_TIMEOUT,
    )
    if not slices["items"]:
        raise UsageError(f"{where} publishes no ResourceSlice in this cluster: is it installed?")
    for device_class in profile.device_classes:
        if device_class.create:
            continue
        try:
            objects.get_cluster_custom_object(
                group, version, "deviceclasses", device_class.name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                raise UsageError(f"{where}: DeviceClass {device_class.name} does not exist in this cluster") from None
            raise

"""The reference device plugin's answers (rollback.device_plugin), built without a kubelet or a socket."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.rollback import device_plugin
from dra_wire.kubelet_api import KubeletAPI, load


@pytest.fixture(scope="module")
def api() -> KubeletAPI:
    return load()


@pytest.mark.needs_go
def test_bindings_carry_the_device_plugin_api_v1beta1(api: KubeletAPI) -> None:
    services = api.deviceplugin.DESCRIPTOR.services_by_name
    methods = sorted(m.name for m in services["DevicePlugin"].methods)
    assert api.deviceplugin.DESCRIPTOR.package == "v1beta1", api.deviceplugin.DESCRIPTOR.package
    assert methods == [
        "Allocate",
        "GetDevicePluginOptions",
        "GetPreferredAllocation",
        "ListAndWatch",
        "PreStartContainer",
    ], methods
    assert [m.name for m in services["Registration"].methods] == ["Register"], services["Registration"].methods


def test_device_ids_are_named_after_the_resource_and_numbered() -> None:
    assert device_plugin.device_ids("example.com/gpu", 3) == ["gpu-0", "gpu-1", "gpu-2"]


@pytest.mark.needs_go
def test_every_device_is_listed_healthy(api: KubeletAPI) -> None:
    response = device_plugin.devices_response(api, ["gpu-0", "gpu-1"])
    listed = [(d.ID, d.health) for d in response.devices]
    assert listed == [("gpu-0", "Healthy"), ("gpu-1", "Healthy")], listed


@pytest.mark.needs_go
def test_allocate_names_each_containers_devices_in_its_environment(api: KubeletAPI) -> None:
    messages = api.deviceplugin
    request = messages.AllocateRequest(
        container_requests=[
            messages.ContainerAllocateRequest(devices_ids=["gpu-1"]),
            messages.ContainerAllocateRequest(devices_ids=["gpu-0", "gpu-2"]),
        ]
    )
    response = device_plugin.allocate_response(api, request, ["gpu-0", "gpu-1", "gpu-2"], "IDS")
    envs = [dict(c.envs) for c in response.container_responses]
    assert envs == [{"IDS": "gpu-1"}, {"IDS": "gpu-0,gpu-2"}], envs


@pytest.mark.needs_go
def test_allocate_refuses_a_device_the_plugin_does_not_have(api: KubeletAPI) -> None:
    messages = api.deviceplugin
    request = messages.AllocateRequest(container_requests=[messages.ContainerAllocateRequest(devices_ids=["gpu-9"])])
    with pytest.raises(ValueError, match="gpu-9"):
        device_plugin.allocate_response(api, request, ["gpu-0"], "IDS")


@pytest.mark.needs_go
def test_preferred_allocation_keeps_the_required_devices_then_takes_the_lowest_numbers(api: KubeletAPI) -> None:
    messages = api.deviceplugin
    request = messages.PreferredAllocationRequest(
        container_requests=[
            messages.ContainerPreferredAllocationRequest(
                available_deviceIDs=["gpu-10", "gpu-2", "gpu-7", "gpu-3"],
                must_include_deviceIDs=["gpu-7"],
                allocation_size=3,
            )
        ]
    )
    response = device_plugin.preferred_allocation(api, request)
    chosen = [list(c.deviceIDs) for c in response.container_responses]
    assert chosen == [["gpu-7", "gpu-2", "gpu-3"]], chosen


@pytest.mark.needs_go
def test_registration_names_version_endpoint_and_resource(api: KubeletAPI) -> None:
    config = device_plugin.PluginConfig("example.com/gpu", 4, Path("/tmp/plugins"))
    request = device_plugin.register_request(api, config)
    assert (request.version, request.endpoint, request.resource_name) == (
        "v1beta1",
        "fake-example-com-gpu.sock",
        "example.com/gpu",
    ), request
    assert request.options.get_preferred_allocation_available, request.options


@pytest.mark.parametrize(
    "argv",
    [
        ["--devices", "0"],
        ["--resource", "gpu"],
        ["--resource", "kubernetes.io/gpu"],
        ["--socket", "kubelet.sock"],
        ["--plugin-dir", "relative"],
    ],
)
def test_bad_command_lines_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        device_plugin.parse_args(argv)
    error = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and error[-1].startswith(f"python -m {device_plugin.__name__}: error:"), error

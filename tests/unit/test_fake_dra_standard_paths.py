"""The reference driver's --standard-paths: its sockets at the kubelet's fixed paths, as vendor drivers have them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2 as registration
from fake_dra.__main__ import parse_args
from fake_dra.faults import FaultSet
from fake_dra.server import registration_servicer

DRIVER = "gpu.fake-dra.example.com"
BASE = [f"--driver-name={DRIVER}", "--node-name=node-a"]


class _Calls:
    def record(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_standard_paths_put_both_sockets_under_var_lib_kubelet() -> None:
    config = parse_args([*BASE, "--standard-paths"])
    assert config.registration_socket == Path(f"/var/lib/kubelet/plugins_registry/{DRIVER}-reg.sock"), config
    assert config.dra_socket == Path(f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"), config


def test_get_info_names_the_socket_under_the_fixed_path() -> None:
    config = parse_args([*BASE, "--standard-paths"])
    core = SimpleNamespace(config=config, faults=FaultSet(), calls=_Calls())
    info = registration_servicer(core).GetInfo(registration.InfoRequest(), None)  # type: ignore[arg-type]
    assert isinstance(info, registration.PluginInfo), info
    assert (info.name, info.endpoint) == (DRIVER, f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"), info


def test_standard_paths_refuse_another_kubelet_root(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([*BASE, "--standard-paths", "--kubelet-root=/tmp/elsewhere"])
    assert exited.value.code == 2
    assert "--standard-paths fixes the kubelet root at /var/lib/kubelet" in capsys.readouterr().err


def test_without_the_option_the_kubelet_root_is_still_a_flag() -> None:
    assert parse_args([*BASE, "--kubelet-root=/tmp/k"]).dra_socket == Path(f"/tmp/k/plugins/{DRIVER}/dra.sock")

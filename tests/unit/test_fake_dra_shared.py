"""The reference driver's gpu-shared profile: shareable devices, and a prepare per share (unless the mutant)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from fake_dra import devices
from fake_dra.broken import BrokenMode
from fake_dra.config import DriverConfig
from fake_dra.core import ClaimRef, DriverCore
from fake_dra.faults import FaultSet
from fake_dra.kube import DriverAPI
from fake_dra.recorder import CallLog
from fake_dra.state import PreparedClaims

DRIVER = "gpu.example.com"
SHARES = {"a": "11111111-1111-1111-1111-111111111111", "b": "22222222-2222-2222-2222-222222222222"}


class _SharedClaims(DriverAPI):
    """Claims `a` and `b`, each a share of gpu-shared-0 on node-a, in memory; status writes recorded."""

    def __init__(self) -> None:
        super().__init__(ApiClient(), DRIVER)
        selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        result = {"driver": DRIVER, "pool": "node-a", "device": "gpu-shared-0", "request": "share"}
        self.claims = {
            name: {
                "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                "status": {
                    "allocation": {
                        "devices": {"results": [{**result, "shareID": share, "consumedCapacity": {"compute": "50"}}]},
                        "nodeSelector": {"nodeSelectorTerms": [selector]},
                    }
                },
            }
            for name, share in SHARES.items()
        }
        self.status: dict[str, list[dict[str, Any]]] = {}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.claims[name]

    def apply_device_status(self, claim: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        self.status[claim["metadata"]["name"]] = entries

    def list_slices(self, node: str) -> list[dict[str, Any]]:
        return []


def _core(tmp_path: Path, broken: frozenset[BrokenMode] = frozenset()) -> tuple[DriverCore, _SharedClaims]:
    config = DriverConfig(
        driver_name=DRIVER,
        node_name="node-a",
        kubelet_root=tmp_path / "kubelet",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "state",
        profile="gpu-shared",
        devices=1,
        broken=broken,
    )
    config.state_dir.mkdir(parents=True)
    api = _SharedClaims()
    calls = CallLog(config.state_dir / "calls.jsonl", "node-a")
    return DriverCore(config, api, FaultSet(), calls, PreparedClaims(config.state_dir / "prepared.json")), api


def _ref(name: str) -> list[ClaimRef]:
    return [ClaimRef(namespace="ns", uid=f"uid-{name}", name=name)]


def test_gpu_shared_devices_allow_multiple_allocations_with_request_policies(tmp_path: Path) -> None:
    core, _ = _core(tmp_path)
    (device,) = devices.resource_slices(core.config, 1, unavailable=set(), published=1)[0]["spec"]["devices"]
    assert device["name"] == "gpu-shared-0" and device["allowMultipleAllocations"] is True
    assert set(device["capacity"]) == {"memory", "compute"}
    assert all("requestPolicy" in capacity for capacity in device["capacity"].values()), device


def test_each_share_gets_its_own_cdi_device_share_id_and_status_entry(tmp_path: Path) -> None:
    core, api = _core(tmp_path)
    answers = {name: core.prepare(_ref(name))[f"uid-{name}"].devices[0] for name in SHARES}
    assert {name: answer["shareID"] for name, answer in answers.items()} == SHARES
    assert answers["a"]["cdiDeviceIDs"] != answers["b"]["cdiDeviceIDs"], answers
    assert {name: entries[0]["shareID"] for name, entries in api.status.items()} == SHARES
    assert core.unprepare(_ref("a")) == {"uid-a": ""}
    left = sorted(p.name for p in core.config.cdi_dir.iterdir())
    assert left == [f"{DRIVER}-share-gpu-shared-0-{SHARES['b']}.json"], "b's spec outlives a's unprepare"


def test_the_share_id_mutant_gives_every_share_one_spec_that_unprepare_of_either_removes(tmp_path: Path) -> None:
    core, api = _core(tmp_path, frozenset({BrokenMode.PREPARE_IGNORES_SHARE_ID}))
    answers = {name: core.prepare(_ref(name))[f"uid-{name}"].devices[0] for name in SHARES}
    assert answers["a"]["cdiDeviceIDs"] == answers["b"]["cdiDeviceIDs"], answers
    assert not any("shareID" in answer for answer in answers.values()), answers
    assert {name: entries[0]["shareID"] for name, entries in api.status.items()} == SHARES, "its status is right"
    core.unprepare(_ref("a"))
    assert list(core.config.cdi_dir.iterdir()) == [], "b's CDI device went with a's unprepare"


@pytest.mark.parametrize("profile", ["gpu", "nic"])
def test_devices_of_other_profiles_are_not_shareable(tmp_path: Path, profile: str) -> None:
    core, _ = _core(tmp_path)
    config = core.config.__class__(**{**core.config.__dict__, "profile": profile})
    (device,) = devices.resource_slices(config, 1, unavailable=set(), published=1)[0]["spec"]["devices"]
    assert "allowMultipleAllocations" not in device

"""Pure logic of the reference driver: fault parsing and matching, the published pool, CDI specs, the call log."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiClient

from dra_conformance.report.masking import Masker
from fake_dra import broken, cdi, devices, identifiers
from fake_dra.__main__ import parse_args
from fake_dra.config import DriverConfig
from fake_dra.core import ClaimRef, DriverCore, allocated_node
from fake_dra.faults import FAULT_SCHEMA, MODES, Fault, FaultError, FaultSet
from fake_dra.kube import DriverAPI, at_most_every
from fake_dra.recorder import CallLog
from fake_dra.state import PreparedClaims

# A thread waiting on a condition must be released within this long after the fault is cleared.
RELEASE_DEADLINE = 5.0


def _config(tmp_path: Path, **overrides: object) -> DriverConfig:
    base: dict[str, object] = dict(
        driver_name="gpu.example.com",
        node_name="node-a",
        kubelet_root=tmp_path / "k",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "s",
        devices=3,
    )
    return DriverConfig(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"mode": "melt"}, "mode: 'melt' is not one of"),
        ({"mode": "slow-prepare"}, "fault: 'delay' is a required property"),
        ({"mode": "slow-prepare", "delay": -1}, "delay: -1 is less than"),
        ({"mode": "reduced-capacity"}, "fault: 'devices' is a required property"),
        ({"mode": "crash", "when": "now"}, "('when' was unexpected)"),
        (["crash"], "fault: ['crash'] is not of type 'object'"),
        ({"mode": "unavailable", "device": 0}, "device: 0 is not of type 'string'"),
        ({"mode": "reduced-capacity", "devices": True}, "devices: True is not of type 'integer'"),
    ],
    ids=[
        "unknown-mode",
        "slow-without-delay",
        "negative-delay",
        "capacity-without-count",
        "unknown-field",
        "not-object",
        "device-not-a-string",
        "boolean-count",
    ],
)
def test_invalid_fault_is_rejected_with_the_offending_field(raw: object, expected: str) -> None:
    with pytest.raises(FaultError) as rejected:
        Fault.parse(raw)
    assert expected in str(rejected.value) and "\n" not in str(rejected.value), str(rejected.value)


def test_fault_schema_names_exactly_the_fields_and_modes_of_a_fault() -> None:
    assert set(FAULT_SCHEMA["properties"]) == {f.name for f in dataclasses.fields(Fault)}
    assert set(FAULT_SCHEMA["properties"]["mode"]["enum"]) == set(MODES)


def test_claim_scoped_fault_applies_to_that_claim_only() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "prepare-error", "claim": "uid-1"})])
    assert faults.find("prepare-error", claim="uid-1") is not None
    assert faults.find("prepare-error", claim="uid-2") is None


def test_device_scoped_fault_marks_only_that_device_unavailable() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "unavailable", "device": "gpu-1"})])
    assert faults.unavailable_devices(["gpu-0", "gpu-1", "gpu-2"]) == {"gpu-1"}


def test_clearing_a_hang_releases_the_waiting_call() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "hang-prepare"})])
    released: list[bool] = []
    waiter = threading.Thread(
        target=lambda: released.append(faults.wait_cleared("hang-prepare", claim="u", timeout=RELEASE_DEADLINE))
    )
    waiter.start()
    faults.replace([])
    waiter.join(RELEASE_DEADLINE)
    assert released == [True], f"waiter result {released}, alive={waiter.is_alive()}"


def test_slice_taints_unavailable_devices_and_publishes_the_reduced_count(tmp_path: Path) -> None:
    manifest = devices.resource_slice(_config(tmp_path), 7, unavailable={"gpu-1"}, published=2)
    spec = manifest["spec"]
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"], spec["devices"]
    assert spec["devices"][1]["taints"][0]["effect"] == "NoSchedule", spec["devices"][1]
    assert "taints" not in spec["devices"][0]
    assert spec["pool"] == {"name": "node-a", "generation": 7, "resourceSliceCount": 1}
    assert spec["nodeName"] == "node-a" and spec["driver"] == "gpu.example.com"


@pytest.mark.parametrize(("count", "slices"), [(1, 1), (128, 1), (129, 2), (1000, 8)])
def test_pool_is_split_into_slices_of_at_most_128_devices(tmp_path: Path, count: int, slices: int) -> None:
    config = _config(tmp_path, devices=count)
    manifests = devices.resource_slices(config, 5, unavailable=set(), published=count)
    assert [m["metadata"]["name"] for m in manifests] == [f"node-a-gpu.example.com-{i}" for i in range(slices)]
    assert all(len(m["spec"]["devices"]) <= devices.MAX_DEVICES_PER_SLICE for m in manifests)
    pools = [m["spec"]["pool"] for m in manifests]
    assert pools == [{"name": "node-a", "generation": 5, "resourceSliceCount": slices}] * slices, pools
    assert all((m["spec"]["driver"], m["spec"]["nodeName"]) == ("gpu.example.com", "node-a") for m in manifests)
    names = [d["name"] for m in manifests for d in m["spec"]["devices"]]
    assert names == devices.device_names(config), "every device exactly once, in index order"


def test_pool_without_devices_is_one_empty_slice(tmp_path: Path) -> None:
    (manifest,) = devices.resource_slices(_config(tmp_path), 2, unavailable=set(), published=0)
    assert manifest["spec"]["devices"] == []
    assert manifest["spec"]["pool"] == {"name": "node-a", "generation": 2, "resourceSliceCount": 1}


def test_pool_with_a_tainted_device_uses_slices_of_at_most_64_devices(tmp_path: Path) -> None:
    config = _config(tmp_path, devices=1000)
    manifests = devices.resource_slices(config, 3, unavailable={"gpu-999"}, published=1000)
    assert len(manifests) == 16, [len(m["spec"]["devices"]) for m in manifests]
    assert all(len(m["spec"]["devices"]) <= devices.MAX_TAINTED_DEVICES_PER_SLICE for m in manifests)
    assert {m["spec"]["pool"]["resourceSliceCount"] for m in manifests} == {16}
    assert manifests[-1]["spec"]["devices"][-1]["taints"][0]["key"] == devices.UNAVAILABLE_TAINT_KEY


def _raw(body: dict[str, Any]) -> SimpleNamespace:
    """A raw (`_preload_content=False`) response: its body, and the connection hand-back the driver calls."""
    return SimpleNamespace(data=json.dumps(body).encode(), release_conn=lambda: None)


class _FakeSlices:
    """The ResourceSlice calls of ResourceV1Api over a dict, enough for DriverAPI's pool helpers."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.version = 0

    def list_resource_slice(self, *, field_selector: str, **_: object) -> SimpleNamespace:
        wanted = dict(term.split("=", 1) for term in field_selector.split(","))
        items = [
            s
            for s in self.stored.values()
            if (s["spec"]["driver"], s["spec"]["nodeName"]) == (wanted["spec.driver"], wanted["spec.nodeName"])
        ]
        return _raw({"items": items})

    def _store(self, manifest: dict[str, Any]) -> None:
        self.version += 1
        self.stored[manifest["metadata"]["name"]] = {
            **manifest,
            "metadata": {**manifest["metadata"], "resourceVersion": str(self.version)},
        }

    def create_resource_slice(self, manifest: dict[str, Any], **_: object) -> SimpleNamespace:
        assert manifest["metadata"]["name"] not in self.stored, "create of an existing slice"
        self._store(manifest)
        return _raw(manifest)

    def replace_resource_slice(self, name: str, manifest: dict[str, Any], **_: object) -> SimpleNamespace:
        assert manifest["metadata"]["resourceVersion"] == self.stored[name]["metadata"]["resourceVersion"]
        self._store(manifest)
        return _raw(manifest)

    def delete_resource_slice(self, name: str, **_: object) -> None:
        del self.stored[name]


class _FakeNodes:
    """CoreReader of Nodes: every node exists, with a UID derived from its name."""

    def get(self, path: str, **params: str) -> dict[str, Any]:
        assert path == "/api/v1/nodes/{name}", path
        return {"metadata": {"name": params["name"], "uid": f"uid-{params['name']}"}}


def _fake_api(slices: _FakeSlices) -> DriverAPI:
    api = DriverAPI(ApiClient(), "gpu.example.com")
    api.resource = slices
    api.nodes = _FakeNodes()  # type: ignore[assignment]
    return api


def test_republish_writes_every_slice_at_the_new_generation_and_deletes_the_rest(tmp_path: Path) -> None:
    config = _config(tmp_path, devices=300)
    slices = _FakeSlices()
    other_node = devices.resource_slices(_config(tmp_path, node_name="node-b"), 9, unavailable=set(), published=1)
    slices.create_resource_slice(other_node[0])
    api = _fake_api(slices)
    api.publish_pool("node-a", devices.resource_slices(config, 1, unavailable=set(), published=300))
    node_a = [f"node-a-gpu.example.com-{i}" for i in range(3)]
    assert sorted(slices.stored) == [*node_a, "node-b-gpu.example.com-0"]
    api.publish_pool("node-a", devices.resource_slices(config, 2, unavailable=set(), published=300))
    assert [slices.stored[name]["spec"]["pool"]["generation"] for name in node_a] == [2, 2, 2]
    api.publish_pool("node-a", devices.resource_slices(config, 3, unavailable=set(), published=100))
    assert sorted(slices.stored) == [node_a[0], "node-b-gpu.example.com-0"], "extra slices of node-a not deleted"
    assert slices.stored[node_a[0]]["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    api.delete_pool("node-a")
    assert sorted(slices.stored) == ["node-b-gpu.example.com-0"], "delete_pool must leave other nodes alone"


def test_published_slices_are_owned_by_their_node(tmp_path: Path) -> None:
    slices = _FakeSlices()
    _fake_api(slices).publish_pool(
        "node-a", devices.resource_slices(_config(tmp_path), 1, unavailable=set(), published=2)
    )
    owners = [s["metadata"]["ownerReferences"] for s in slices.stored.values()]
    assert owners == [[{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-node-a", "controller": True}]]


def test_restart_generation_is_newer_than_every_slice_of_the_pool(tmp_path: Path) -> None:
    config = _config(tmp_path, devices=300)
    config.state_dir.mkdir()
    slices = _FakeSlices()
    stale = devices.resource_slices(config, 4, unavailable=set(), published=300)
    newest = devices.resource_slices(config, 7, unavailable=set(), published=300)
    for manifest in (stale[0], newest[1], stale[2]):
        slices.create_resource_slice(manifest)
    core = DriverCore(
        config,
        _fake_api(slices),
        FaultSet(),
        CallLog(tmp_path / "calls.jsonl", "node-a"),
        PreparedClaims(tmp_path / "p"),
    )
    assert core.generation == 8
    assert (config.state_dir / "generation").read_text() == "8"


def test_nic_profile_devices_carry_interface_and_mac(tmp_path: Path) -> None:
    manifest = devices.resource_slice(_config(tmp_path, profile="nic"), 1, unavailable=set(), published=3)
    attributes = manifest["spec"]["devices"][2]["attributes"]
    assert attributes["interfaceName"] == {"string": "fake2"}, attributes
    assert attributes["mac"]["string"].count(":") == 5, attributes


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
            "n1",
        ),
        (
            {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
                ]
            },
            "",
        ),
        ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}, ""),
        (None, ""),
    ],
    ids=["single-node", "two-nodes", "label-selector", "no-selector"],
)
def test_allocated_node_is_only_a_single_named_node(selector: object, expected: str) -> None:
    assert allocated_node({"nodeSelector": selector}) == expected


def test_cdi_spec_names_one_device_per_allocated_device_and_is_removed(tmp_path: Path) -> None:
    ids = cdi.write_spec(tmp_path, "gpu.example.com", "gpu", "uid-1", ["gpu-0", "gpu-3"])
    assert ids == ["gpu.example.com/gpu=uid-1-gpu-0", "gpu.example.com/gpu=uid-1-gpu-3"]
    spec = json.loads(cdi.spec_path(tmp_path, "gpu.example.com", "uid-1").read_text())
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-0", "uid-1-gpu-3"], spec
    cdi.remove_spec(tmp_path, "gpu.example.com", "uid-1")
    cdi.remove_spec(tmp_path, "gpu.example.com", "uid-1")  # idempotent
    assert list(tmp_path.iterdir()) == []


def test_cdi_spec_directory_is_created_by_the_first_write(tmp_path: Path) -> None:
    cdi_dir = tmp_path / "var" / "run" / "cdi"
    cdi.write_spec(cdi_dir, "gpu.example.com", "gpu", "uid-1", ["gpu-0"])
    assert [path.name for path in cdi_dir.iterdir()] == ["gpu.example.com-uid-1.json"], "no partial file left over"


def test_call_log_returns_sorted_copies_and_mirrors_to_disk(tmp_path: Path) -> None:
    log = CallLog(tmp_path / "calls.jsonl", "node-a")
    log.record("NodeUnprepareResources", 20.0, claims=["b"], outcome="ok")
    log.record("NodePrepareResources", 10.0, claims=["a"], outcome="ok")
    calls = log.calls()
    assert [c["method"] for c in calls] == ["NodePrepareResources", "NodeUnprepareResources"]
    calls[0]["outcome"] = "tampered"
    assert log.calls()[0]["outcome"] == "ok"
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2


def test_each_concurrent_put_returns_once_the_file_on_disk_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "prepared.json"
    claims = PreparedClaims(path)
    writes: list[str] = []
    replace_file = claims._replace_file

    def counted(body: str) -> None:
        writes.append(body)
        replace_file(body)

    claims._replace_file = counted  # type: ignore[method-assign]
    missing: list[str] = []
    barrier = threading.Barrier(40)

    def put(index: int) -> None:
        barrier.wait(timeout=10)
        claims.put(f"uid-{index}", {"name": f"c{index}"})
        if f"uid-{index}" not in json.loads(path.read_text()):
            missing.append(f"uid-{index}")

    threads = [threading.Thread(target=put, args=(index,)) for index in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not missing, f"put returned before the file held its claim: {missing}"
    assert len(json.loads(path.read_text())) == 40
    assert 1 <= len(writes) <= 40, f"{len(writes)} file writes for 40 changes"


def test_a_state_file_written_outside_the_lock_loses_concurrent_changes_the_process_keeps(tmp_path: Path) -> None:
    """The CHECKPOINT_WRITTEN_OUTSIDE_LOCK mutant: right in memory, wrong on disk (what a restart loads)."""
    path = tmp_path / "prepared.json"
    claims = PreparedClaims(path, writes_outside_lock=True)
    barrier = threading.Barrier(4)

    def put(index: int) -> None:
        barrier.wait(timeout=10)
        claims.put(f"uid-{index}", {"name": f"c{index}"})

    threads = [threading.Thread(target=put, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(claims.all()) == [f"uid-{index}" for index in range(4)]
    on_disk = sorted(PreparedClaims(path).all())
    assert len(on_disk) < 4, f"every change reached the file although written outside the lock: {on_disk}"


def test_index_as_string_turns_only_int_index_attributes_into_strings() -> None:
    slices = [{"spec": {"devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}, "model": {"string": "m"}}}]}}]
    changed = broken.index_as_string(slices)
    assert changed[0]["spec"]["devices"][0]["attributes"] == {"index": {"string": "0"}, "model": {"string": "m"}}


def test_a_state_file_written_by_release_2_is_read_by_release_1(tmp_path: Path) -> None:
    path = tmp_path / "prepared.json"
    PreparedClaims(path, "2.0.0").put("uid-1", {"name": "c1", "devices": ["gpu-0"]})
    assert json.loads(path.read_text())["format"] == 2
    older = PreparedClaims(path, "1.0.0")
    assert older.get("uid-1") == {"name": "c1", "devices": ["gpu-0"]} and older.written_by_major == 2
    older.put("uid-2", {"name": "c2", "devices": ["gpu-1"]})
    assert set(json.loads(path.read_text())) == {"uid-1", "uid-2"}, "release 1 writes the bare map"
    assert PreparedClaims(path, "2.0.0").written_by_major == 1


def test_release_2_devices_carry_firmware_and_their_driver_version(tmp_path: Path) -> None:
    newer = devices.resource_slices(_config(tmp_path, driver_version="2.1.0"), 1, unavailable=set(), published=1)
    older = devices.resource_slices(_config(tmp_path), 1, unavailable=set(), published=1)
    assert newer[0]["spec"]["devices"][0]["attributes"]["driverVersion"] == {"version": "2.1.0"}
    assert newer[0]["spec"]["devices"][0]["attributes"]["firmware"] == {"string": "fw-2"}
    assert "firmware" not in older[0]["spec"]["devices"][0]["attributes"]


def test_an_informational_fault_taints_devices_with_effect_none(tmp_path: Path) -> None:
    listed = devices.resource_slices(_config(tmp_path), 1, unavailable=set(), published=2, informational={"gpu-1"})
    tainted = {d["name"]: d.get("taints") for d in listed[0]["spec"]["devices"]}
    assert tainted["gpu-0"] is None
    assert tainted["gpu-1"] == [{"key": devices.INFORMATIONAL_TAINT_KEY, "value": "true", "effect": "None"}]


# --- broken modes: the bugs the conformance checks must catch --------------------------------------------------------


def test_rotated_answers_pair_each_claim_with_the_next_claims_answer() -> None:
    assert broken.rotated({"a": 1, "b": 2, "c": 3}) == {"a": 2, "b": 3, "c": 1}
    assert broken.rotated({"a": 1}) == {"a": 1}, "one claim has no other claim's answer to get"


def test_product_vendor_id_keeps_class_and_name_but_not_the_vendor() -> None:
    assert broken.product_vendor_id("gpu.example.com/gpu=uid-1-gpu-0") == "fake-dra.example.com/gpu=uid-1-gpu-0"


def test_next_device_wraps_around_the_pool() -> None:
    assert [broken.next_device(f"nic-{i}", 3) for i in range(3)] == ["nic-1", "nic-2", "nic-0"]


def test_cdi_spec_edits_may_set_up_another_device_than_they_are_named_for(tmp_path: Path) -> None:
    ids = cdi.write_spec(tmp_path, "gpu.example.com", "gpu", "uid-1", ["gpu-0"], set_up=["gpu-1"])
    spec = json.loads(cdi.spec_path(tmp_path, "gpu.example.com", "uid-1").read_text())
    assert ids == ["gpu.example.com/gpu=uid-1-gpu-0"]
    assert spec["devices"][0]["containerEdits"]["env"][0] == "FAKE_DRA_DEVICE=gpu-1", spec


def test_removing_the_drivers_specs_leaves_other_drivers_alone(tmp_path: Path) -> None:
    for uid in ("uid-1", "uid-2"):
        cdi.write_spec(tmp_path, "gpu.example.com", "gpu", uid, ["gpu-0"])
    cdi.write_spec(tmp_path, "nic.example.com", "nic", "uid-3", ["nic-0"])
    cdi.remove_driver_specs(tmp_path, "gpu.example.com")
    assert [p.name for p in tmp_path.iterdir()] == ["nic.example.com-uid-3.json"]


class _Claims(DriverAPI):
    """Claims allocated one device each on node-a, in memory; status writes and published pools recorded."""

    def __init__(self, devices_by_claim: dict[str, str]) -> None:
        super().__init__(ApiClient(), "gpu.example.com")
        selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        self.claims = {
            name: {
                "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {"driver": "gpu.example.com", "pool": "node-a", "device": device, "request": "gpu"}
                            ]
                        },
                        "nodeSelector": {"nodeSelectorTerms": [selector]},
                    }
                },
            }
            for name, device in devices_by_claim.items()
        }
        self.status: dict[str, list[dict[str, Any]]] = {}
        self.pools: list[list[dict[str, Any]]] = []

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.claims[name]

    def apply_device_status(self, claim: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        self.status[claim["metadata"]["name"]] = entries

    def list_slices(self, node: str) -> list[dict[str, Any]]:
        return []

    def publish_pool(self, node: str, manifests: list[dict[str, Any]], *, delete_first: bool = False) -> None:
        self.pools.append(manifests)


def _broken_core(
    tmp_path: Path, mode: broken.BrokenMode | None, *, profile: str = "gpu", **overrides: object
) -> tuple[DriverCore, _Claims]:
    config = _config(tmp_path, profile=profile, broken=frozenset({mode} if mode else set()), **overrides)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    api = _Claims({"a": f"{profile}-0", "b": f"{profile}-1", "c": f"{profile}-2"})
    calls = CallLog(config.state_dir / "calls.jsonl", config.node_name)
    return DriverCore(config, api, FaultSet(), calls, PreparedClaims(config.state_dir / "prepared.json")), api


def _refs(*names: str) -> list[ClaimRef]:
    return [ClaimRef(namespace="ns", uid=f"uid-{name}", name=name) for name in names]


def _answered(results: dict[str, Any]) -> dict[str, list[str]]:
    return {uid: [d["deviceName"] for d in result.devices] for uid, result in results.items()}


@pytest.mark.parametrize(
    ("mode", "answered"),
    [
        (None, {"uid-a": ["gpu-0"], "uid-b": ["gpu-1"], "uid-c": ["gpu-2"]}),
        (broken.BrokenMode.BATCH_ANSWERS_SWAPPED, {"uid-a": ["gpu-1"], "uid-b": ["gpu-2"], "uid-c": ["gpu-0"]}),
    ],
    ids=["reference", "batch-answers-swapped"],
)
def test_a_batch_is_answered_per_claim_unless_the_answers_are_swapped(
    tmp_path: Path, mode: broken.BrokenMode | None, answered: dict[str, list[str]]
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    assert _answered(core.prepare(_refs("a", "b", "c"))) == answered
    assert _answered(core.prepare(_refs("b"))) == {"uid-b": ["gpu-1"]}, "a claim alone is answered correctly"


@pytest.mark.parametrize(
    ("mode", "left"),
    [(None, []), (broken.BrokenMode.UNPREPARE_HANDLES_ONLY_FIRST, ["uid-b", "uid-c"])],
    ids=["reference", "unprepare-handles-only-first"],
)
def test_unprepare_of_a_batch_undoes_every_claim_unless_it_handles_only_the_first(
    tmp_path: Path, mode: broken.BrokenMode | None, left: list[str]
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    core.prepare(_refs("a", "b", "c"))
    assert core.unprepare(_refs("a", "b", "c")) == {"uid-a": "", "uid-b": "", "uid-c": ""}
    assert sorted(core.prepared.all()) == left
    assert sorted(p.name for p in core.config.cdi_dir.iterdir()) == [f"gpu.example.com-{uid}.json" for uid in left]


def test_cdi_ids_of_the_unresolvable_mutant_name_a_kind_no_spec_defines(tmp_path: Path) -> None:
    core, _ = _broken_core(tmp_path, broken.BrokenMode.CDI_ID_UNRESOLVABLE)
    ids = core.prepare(_refs("a"))["uid-a"].devices[0]["cdiDeviceIDs"]
    spec = json.loads(cdi.spec_path(core.config.cdi_dir, "gpu.example.com", "uid-a").read_text())
    assert ids == ["fake-dra.example.com/gpu=uid-a-gpu-0"]
    assert spec["kind"] == "gpu.example.com/gpu", spec


@pytest.mark.parametrize(
    ("mode", "left"),
    [(None, ["gpu.example.com-uid-b.json"]), (broken.BrokenMode.UNPREPARE_REMOVES_OTHER_CLAIMS_CDI, [])],
    ids=["reference", "unprepare-removes-other-claims-cdi"],
)
def test_unprepare_of_one_claim_keeps_the_others_cdi_specs_unless_it_removes_them(
    tmp_path: Path, mode: broken.BrokenMode | None, left: list[str]
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    core.prepare(_refs("a"))
    core.prepare(_refs("b"))
    core.unprepare(_refs("a"))
    assert sorted(p.name for p in core.config.cdi_dir.iterdir()) == left


@pytest.mark.parametrize(
    ("mode", "set_up"),
    [(None, "gpu-0"), (broken.BrokenMode.CDI_EDITS_NAME_OTHER_DEVICE, "gpu-1")],
    ids=["reference", "cdi-edits-name-other-device"],
)
def test_cdi_edits_set_up_the_allocated_device_unless_they_name_the_next(
    tmp_path: Path, mode: broken.BrokenMode | None, set_up: str
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    answer = core.prepare(_refs("a"))["uid-a"]
    spec = json.loads(cdi.spec_path(core.config.cdi_dir, "gpu.example.com", "uid-a").read_text())
    assert answer.devices[0]["deviceName"] == "gpu-0", "the answer reports the allocated device either way"
    assert f"FAKE_DRA_DEVICE={set_up}" in spec["devices"][0]["containerEdits"]["env"], spec


@pytest.mark.parametrize(
    ("mode", "bumped"),
    [(None, True), (broken.BrokenMode.REPUBLISHES_SAME_GENERATION, False)],
    ids=["reference", "republishes-same-generation"],
)
def test_a_fault_that_changes_the_pool_republishes_it_at_a_new_generation_unless_broken(
    tmp_path: Path, mode: broken.BrokenMode | None, bumped: bool
) -> None:
    core, api = _broken_core(tmp_path, mode)
    before = core.generation
    core.set_faults([Fault.parse({"mode": "unavailable", "device": "gpu-1"})])
    published = api.pools[-1][0]["spec"]
    assert any(d.get("taints") for d in published["devices"]), "the pool was republished with the taint"
    assert (published["pool"]["generation"] > before) is bumped, published["pool"]


@pytest.mark.parametrize(
    ("mode", "pool"),
    [(None, "node-a"), (broken.BrokenMode.HEALTH_WRONG_POOL, "gpu.example.com")],
    ids=["reference", "health-wrong-pool"],
)
def test_health_names_the_published_pool_unless_broken(
    tmp_path: Path, mode: broken.BrokenMode | None, pool: str
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    assert core.health_pool() == pool


@pytest.mark.parametrize(
    ("mode", "index"),
    [(None, 1), (broken.BrokenMode.NETWORK_DATA_MISMATCH, 2)],
    ids=["reference", "network-data-mismatch"],
)
def test_network_data_names_the_devices_interface_unless_numbered_from_one(
    tmp_path: Path, mode: broken.BrokenMode | None, index: int
) -> None:
    core, api = _broken_core(tmp_path, mode, profile="nic")
    core.prepare(_refs("b"))
    network = api.status["b"][0]["networkData"]
    slice_device = devices.resource_slice(core.config, 1, unavailable=set(), published=3)["spec"]["devices"][index]
    assert network["interfaceName"] == slice_device["attributes"]["interfaceName"]["string"]
    assert network["hardwareAddress"] == slice_device["attributes"]["mac"]["string"]


@pytest.mark.parametrize(("delete_first", "order"), [(False, ["replace"]), (True, ["delete", "create"])])
def test_a_republish_replaces_the_slice_in_place_unless_the_mutant_deletes_the_pool_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delete_first: bool, order: list[str]
) -> None:
    slices = _FakeSlices()
    api = _fake_api(slices)
    config = _config(tmp_path)
    api.publish_pool("node-a", devices.resource_slices(config, 1, unavailable=set(), published=2))
    calls: list[str] = []

    def recorded(verb: str) -> Callable[..., Any]:
        method = getattr(slices, f"{verb}_resource_slice")

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(verb)
            return method(*args, **kwargs)

        return call

    for verb in ("create", "replace", "delete"):
        monkeypatch.setattr(slices, f"{verb}_resource_slice", recorded(verb))
    api.publish_pool(
        "node-a", devices.resource_slices(config, 2, unavailable=set(), published=2), delete_first=delete_first
    )
    assert calls == order
    assert [s["spec"]["pool"]["generation"] for s in slices.stored.values()] == [2]


@pytest.mark.parametrize("profile", ["gpu", "nic"])
def test_words_identifiers_are_written_into_attributes_status_data_and_network_data_in_a_shape_no_pattern_knows(
    tmp_path: Path, profile: str
) -> None:
    core, api = _broken_core(tmp_path, None, profile=profile, id_format=identifiers.WORDS)
    core.prepare(_refs("b"))
    (entry,) = api.status["b"]
    attributes = devices.resource_slice(core.config, 1, unavailable=set(), published=3)["spec"]["devices"][1][
        "attributes"
    ]
    assert (
        entry["data"]["uuid"] == attributes["uuid"]
        and entry["data"]["serialNumber"] == (attributes["serialNumber"]["string"])
    )
    values = [attributes["uuid"]["string"], attributes["serialNumber"]["string"]]
    if profile == "nic":
        network = entry["networkData"]
        assert network["interfaceName"] == attributes["interfaceName"]["string"]
        assert network["hardwareAddress"] == attributes["mac"]["string"]
        assert network["ips"] == ["2001:db8:7a7::b/64"], "canonical CIDR, as the API requires"
        values += [network["interfaceName"], network["hardwareAddress"]]
    assert all(v.startswith(f"{identifiers.WORDS_PREFIX}-") for v in values), values
    assert len(set(values)) == len(values), values
    text = " ".join(values)
    assert Masker(set()).mask(text) == text, "the end-of-run patterns must not recognise them"
    assert parse_args(["--driver-name=d", "--node-name=n", "--device-id-format=words"]).id_format == "words"


def test_credential_refresh_runs_on_the_first_request_then_at_most_once_per_interval() -> None:
    runs: list[object] = []
    configuration = object()
    rarely = at_most_every(3600.0, runs.append)
    for _ in range(5):
        rarely(configuration)
    assert runs == [configuration], f"hook ran {len(runs)} times within one interval"
    always = at_most_every(0.0, runs.append)
    always(configuration)
    always(configuration)
    assert len(runs) == 3, f"with no interval the hook must run on every request, ran {len(runs) - 1} times"


@pytest.mark.parametrize(
    ("mode", "rewritten"),
    [(None, True), (broken.BrokenMode.REPLAYED_PREPARE_SKIPS_CDI_SPECS, False)],
    ids=["reference", "replayed-prepare-skips-cdi-specs"],
)
def test_a_repeated_prepare_writes_a_lost_cdi_spec_again_unless_it_answers_from_its_record(
    tmp_path: Path, mode: broken.BrokenMode | None, rewritten: bool
) -> None:
    core, _ = _broken_core(tmp_path, mode)
    first = core.prepare(_refs("a"))["uid-a"]
    spec = cdi.spec_path(core.config.cdi_dir, "gpu.example.com", "uid-a")
    spec.unlink()  # as a reboot empties the CDI dir; prepared.json survives it
    again = core.prepare(_refs("a"))["uid-a"]
    assert again == first, "the repeated prepare answers as the first"
    assert spec.is_file() == rewritten, sorted(p.name for p in core.config.cdi_dir.iterdir())


def test_the_first_request_mutant_answers_every_device_under_the_first_requests_name(tmp_path: Path) -> None:
    core, api = _broken_core(tmp_path, broken.BrokenMode.ANSWERS_UNDER_FIRST_REQUEST)
    results: list[dict[str, Any]] = api.claims["a"]["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
    results.append({**results[0], "device": "gpu-3", "request": "second"})
    answer = core.prepare(_refs("a"))["uid-a"]
    assert [d["requestNames"] for d in answer.devices] == [["gpu"], ["gpu"]], answer


def test_the_other_drivers_mutant_writes_entries_for_the_other_drivers_devices(tmp_path: Path) -> None:
    core, api = _broken_core(tmp_path, broken.BrokenMode.STATUS_FOR_OTHER_DRIVERS_DEVICES)
    results: list[dict[str, Any]] = api.claims["a"]["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
    results.append({"driver": "other.example.com", "pool": "node-a", "device": "dev-0", "request": "theirs"})
    core.prepare(_refs("a"))
    written = sorted((e["driver"], e["device"]) for e in api.status["a"])
    assert written == [("gpu.example.com", "gpu-0"), ("other.example.com", "dev-0")], written

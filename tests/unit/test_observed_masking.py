"""Masking at the source: observed state is masked by position, whatever its values look like, before it is text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.model.findings import RECORD_KIND, Obligations
from dra_conformance.model.masking import ObservedMask, mask_observed, mask_value, token
from dra_conformance.model.obligations import ObligationFailed, Registry
from dra_conformance.model.records import RunRecords, read_records
from dra_conformance.report.masking import Masker

# Values of a shape no pattern of the end-of-run masker knows (no IP, MAC, hex or gpu- prefix).
UUID, SERIAL, IFACE, HW = "zq7-opal-dune-quill-amber", "zq7-heron-lumen-fjord-amber", "zq7-ember", "zq7-hw-bristle"


def _entry() -> dict[str, Any]:
    return {
        "driver": "gpu.example.com",
        "pool": "node-a",
        "device": "nic-0",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared"}],
        "data": {"uuid": {"string": UUID}, "serialNumber": SERIAL, "slots": 4, "healthy": True, "note": None},
        "networkData": {"interfaceName": IFACE, "ips": ["2001:db8::a/64"], "hardwareAddress": HW},
    }


def _text(value: object) -> str:
    return str(value)


def test_everything_under_a_status_entrys_data_and_network_data_is_masked_and_names_stay() -> None:
    claim: dict[str, Any] = {"metadata": {"name": "c"}, "status": {"devices": [_entry()]}}
    masked = mask_observed(claim)
    entry = masked["status"]["devices"][0]
    assert entry["data"] == {
        "uuid": {"string": token("masked", UUID)},
        "serialNumber": token("masked", SERIAL),
        "slots": token("masked", "4"),
        "healthy": True,
        "note": None,
    }
    assert entry["networkData"] == {
        "interfaceName": token("masked", IFACE),
        "ips": [token("ip", "2001:db8::a/64")],
        "hardwareAddress": token("masked", HW),
    }
    assert (entry["driver"], entry["pool"], entry["device"]) == ("gpu.example.com", "node-a", "nic-0")
    assert entry["conditions"] == _entry()["conditions"], "conditions are what checks judge: they stay"
    assert claim["status"]["devices"][0]["data"]["serialNumber"] == SERIAL, "the caller's state is not changed"


@pytest.mark.parametrize(
    "observed",
    [
        pytest.param(_entry(), id="one-entry"),
        pytest.param([_entry()], id="status.devices"),
        pytest.param({"entries": 1, "status.devices": [_entry()]}, id="inside-a-structure-of-the-check"),
        pytest.param(({"prepare": "ok"}, [_entry()]), id="in-a-tuple"),
    ],
)
def test_no_value_of_an_entry_survives_wherever_the_check_puts_it(observed: object) -> None:
    text = _text(mask_observed(observed))
    for value in (UUID, SERIAL, IFACE, HW, "2001:db8::a"):
        assert value not in text, text
    assert "nic-0" in text and "Ready" in text


def test_serial_like_attributes_are_masked_by_name_qualified_or_not_typed_or_bare() -> None:
    device: dict[str, Any] = {
        "name": "gpu-0",
        "attributes": {
            "model": {"string": "FakeGPU-9000"},
            "index": {"int": 0},
            "gpu.example.com/uuid": {"string": UUID},
            "serialNumber": {"string": SERIAL},
            "pciBusID": {"string": "zq7-pci"},
            "deviceId": "zq7-bare",
            "mac": {"string": HW},
        },
    }
    attributes = mask_observed(device)["attributes"]
    assert attributes["model"] == {"string": "FakeGPU-9000"} and attributes["index"] == {"int": 0}
    assert attributes["gpu.example.com/uuid"] == {"string": token("masked", UUID)}
    assert attributes["serialNumber"] == {"string": token("masked", SERIAL)}
    assert attributes["pciBusID"] == {"string": token("masked", "zq7-pci")}
    assert attributes["deviceId"] == token("masked", "zq7-bare")
    assert attributes["mac"] == {"string": token("masked", HW)}


def test_network_fields_are_masked_wherever_they_appear() -> None:
    problems = [{"interfaceName": IFACE, "publishedFor": ["nic-1"]}]
    assert mask_observed(problems) == [{"interfaceName": token("masked", IFACE), "publishedFor": ["nic-1"]}]


def test_dataclasses_are_masked_field_by_field() -> None:
    @dataclass(frozen=True)
    class Record:
        claim: str
        devices: list[dict[str, object]]

    masked = mask_observed(Record("c", [_entry()]))
    assert isinstance(masked, Record) and masked.claim == "c"
    assert SERIAL not in str(masked) and "nic-0" in str(masked)


def test_text_is_left_as_it_is_the_structure_must_be_passed() -> None:
    assert mask_observed(f"entries {[_entry()]}") == f"entries {[_entry()]}"


def test_source_tokens_are_the_ones_the_end_of_run_masker_writes_so_records_correlate() -> None:
    for value in (SERIAL, "2001:db8::a/64", "02:fa:00:00:01:00"):
        assert Masker({value}).mask(f"seen {value}") == f"seen {mask_value(value)}"


def test_no_mask_keeps_the_state_as_it_is() -> None:
    entry = _entry()
    assert ObservedMask(enabled=False)(entry) is entry
    assert ObservedMask()(entry) == mask_observed(entry)


REGISTRY = """
- id: demo.entries-removed
  statement: entries are removed after unprepare
  basis: defensive
  why: users want it
"""


@pytest.mark.parametrize("enabled", [True, False], ids=["masked", "no-mask"])
def test_the_failure_message_and_the_advisory_record_quote_the_masked_state(tmp_path: Path, enabled: bool) -> None:
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "demo.yaml").write_text(REGISTRY)
    registry = Registry.load(tmp_path / "registry")
    records = RunRecords(tmp_path, "main")
    obligations = Obligations("check", True, records, registry, mask=ObservedMask(enabled=enabled))
    with pytest.raises(ObligationFailed) as failed:
        obligations.check("demo.entries-removed", False, [_entry()], "claim c")
    (advisory,) = read_records(tmp_path, RECORD_KIND)
    for text in (str(failed.value), advisory["observed"]):
        assert (SERIAL in text) is not enabled, text
        assert (token("masked", SERIAL) in text) is enabled, text

"""Masking: addresses by pattern, sensitive values by where the artifacts hold them, the same token every time."""

from __future__ import annotations

import json
from pathlib import Path

from dra_conformance.report.masking import Masker, mask_run, sensitive_values, token


def test_values_under_sensitive_keys_are_found_also_in_json_kept_as_a_string() -> None:
    entry = {
        "networkData": {"interfaceName": "fake0", "ips": ["192.0.2.10/24"], "hardwareAddress": "02:fa:00:00:01:00"}
    }
    record = {"claims": {"c": {"status": {"devices": [entry]}}}, "attributes": {"uuid": {"string": "gpu-node-a-0"}}}
    found = sensitive_values({"property": json.dumps(record), "uuid": "allure-result-id-stays"})
    assert found == {"fake0", "192.0.2.10/24", "02:fa:00:00:01:00", "gpu-node-a-0"}


def test_addresses_are_masked_by_pattern_and_versions_and_times_are_not() -> None:
    masker = Masker(set())
    text = "node 10.0.0.7 mac AA:BB:CC:DD:EE:FF v6 fd00::1/64 at 17:45:21 kube v1.37.2 uid 0f1e-22 x.py::test_a"
    masked = masker.mask(text)
    assert "10.0.0.7" not in masked and "AA:BB" not in masked and "fd00::1" not in masked
    assert "17:45:21" in masked and "v1.37.2" in masked and "0f1e-22" in masked and "x.py::test_a" in masked
    assert token("ip", "10.0.0.7") in masked, "the same value always gets the same token"


def test_a_run_directory_is_masked_in_place(tmp_path: Path) -> None:
    records = tmp_path / "records" / "correlation"
    records.mkdir(parents=True)
    (records / "gw0.jsonl").write_text(json.dumps({"networkData": {"interfaceName": "fake3"}}) + "\n")
    (tmp_path / "junit.xml").write_text('<property name="log" value="eth fake3 up at 192.0.2.13"/>')
    counts = mask_run(tmp_path)
    junit = (tmp_path / "junit.xml").read_text()
    assert "fake3" not in junit and "192.0.2.13" not in junit, junit
    assert counts == {"values": 1, "files": 2}

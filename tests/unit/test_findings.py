"""Contract obligations fail a check; defensive ones are advisories in the run report, failures only under strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.report.findings import RECORD_KIND, ObligationFailed, Obligations, summarize_advisories
from dra_conformance.report.records import RunRecords, read_records


def test_broken_contract_fails_with_obligation_source_and_observed_state(tmp_path: Path) -> None:
    obligations = Obligations("check", strict=False, records=RunRecords(tmp_path, "main"))
    with pytest.raises(ObligationFailed) as failed:
        obligations.contract(False, "the response names exactly the requested claims", ["uid-2"], "api.proto:43-50")
    assert str(failed.value) == (
        "contract: the response names exactly the requested claims [api.proto:43-50]; observed: ['uid-2']"
    )
    assert read_records(tmp_path, RECORD_KIND) == []


def test_defensive_finding_is_an_advisory_unless_strict(tmp_path: Path) -> None:
    lenient = Obligations("check-a", strict=False, records=RunRecords(tmp_path, "gw0"))
    lenient.defensive(False, "refuses a claim of another node", "prepared", "manager.go:296-316")
    lenient.defensive(True, "never recorded", "-", "-")
    strict = Obligations("check-b", strict=True, records=RunRecords(tmp_path, "gw1"))
    with pytest.raises(ObligationFailed, match=r"^defensive \(strict\): refuses"):
        strict.defensive(False, "refuses a claim of another node", "prepared", "manager.go:296-316")
    entries = read_records(tmp_path, RECORD_KIND)
    assert [entry["check"] for entry in entries] == ["check-a", "check-b"], entries
    section = summarize_advisories(entries)
    assert section is not None and section.artifact == "advisories.json", section
    assert section.lines[0] == "check-a: refuses a claim of another node; observed: prepared", section.lines


def test_no_advisories_means_no_section() -> None:
    assert summarize_advisories([]) is None

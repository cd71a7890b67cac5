"""A broken obligation acts by its basis: contract fails, defensive advises (fails under strict), harness errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.model.findings import EXERCISED_KIND, RECORD_KIND, Obligations
from dra_conformance.model.obligations import HarnessPreconditionFailed, ObligationFailed, Registry
from dra_conformance.model.records import RunRecords, read_records
from dra_conformance.report.advisories import summarize_advisories

REGISTRY = """
- id: demo.keys-are-requested-uids
  statement: the response names exactly the requested claim UIDs
  basis: contract
  sources:
    - {module: k8s.io/kubelet, version: v0.37.2, path: pkg/apis/dra/v1/api.proto, line: 48, quote: It is an error}
- id: demo.refuses-other-node
  statement: refuses a claim of another node
  basis: defensive
  why: a kubelet never sends one
- id: demo.fixture-ready
  statement: the fixture's claim was allocated
  basis: harness
  why: our own precondition
"""


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "demo.yaml").write_text(REGISTRY)
    return Registry.load(tmp_path / "registry")


def test_broken_contract_fails_naming_the_obligation_why_and_what_was_observed(
    tmp_path: Path, registry: Registry
) -> None:
    obligations = Obligations("check", strict=False, records=RunRecords(tmp_path, "main"), registry=registry)
    with pytest.raises(ObligationFailed) as failed:
        obligations.check("demo.keys-are-requested-uids", False, ["uid-2"], "node-0")
    assert str(failed.value).splitlines() == [
        "contract obligation demo.keys-are-requested-uids broke: node-0: the response names exactly the requested"
        " claim UIDs",
        '  why it is one: k8s.io/kubelet@v0.37.2 pkg/apis/dra/v1/api.proto:48 "It is an error"',
        "  observed: ['uid-2']",
    ]
    assert failed.value.obligation.id == "demo.keys-are-requested-uids"
    assert read_records(tmp_path, RECORD_KIND) == []
    assert read_records(tmp_path, EXERCISED_KIND) == [
        {"id": "demo.keys-are-requested-uids", "check": "check", "held": False}
    ]


def test_defensive_finding_is_an_advisory_unless_strict(tmp_path: Path, registry: Registry) -> None:
    lenient = Obligations("check-a", strict=False, records=RunRecords(tmp_path, "gw0"), registry=registry)
    assert lenient.check("demo.refuses-other-node", False, "prepared") is False
    assert lenient.check("demo.refuses-other-node", True, "-") is True
    strict = Obligations("check-b", strict=True, records=RunRecords(tmp_path, "gw1"), registry=registry)
    with pytest.raises(ObligationFailed, match=r"^defensive obligation demo.refuses-other-node broke"):
        strict.check("demo.refuses-other-node", False, "prepared")
    entries = read_records(tmp_path, RECORD_KIND)
    assert [entry["check"] for entry in entries] == ["check-a", "check-b"], entries
    section = summarize_advisories(entries)
    assert section is not None and section.artifact == "advisories.json", section
    assert section.lines[0] == (
        "demo.refuses-other-node: check-a: refuses a claim of another node; observed: prepared"
    ), section.lines


def test_broken_harness_precondition_errors_instead_of_failing(tmp_path: Path, registry: Registry) -> None:
    obligations = Obligations("check", strict=True, records=RunRecords(tmp_path, "main"), registry=registry)
    with pytest.raises(HarnessPreconditionFailed) as error:
        obligations.fail("demo.fixture-ready", "no node fits")
    assert not isinstance(error.value, AssertionError), "a harness error must not read as the driver's failure"
    with pytest.raises(TypeError, match="defensive"):
        obligations.fail("demo.refuses-other-node", "x")


def test_an_unknown_obligation_id_names_the_registry(tmp_path: Path, registry: Registry) -> None:
    obligations = Obligations("check", strict=False, records=RunRecords(tmp_path, "main"), registry=registry)
    with pytest.raises(KeyError, match=r"demo\.typo.*not in the registry"):
        obligations.check("demo.typo", True, "-")


def test_no_advisories_means_no_section() -> None:
    assert summarize_advisories([]) is None

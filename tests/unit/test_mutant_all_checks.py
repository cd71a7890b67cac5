"""bench/mutants --all-checks reads the obligations that decided a whole-suite run, and classifies the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance.report.certification import Verdict
from fake_dra.broken import BrokenMode
from tests.mutants.all_checks import (
    LEGITIMATE_UNDER_CONTRACT,
    AllChecksRun,
    Result,
    classify,
    command,
    contract_profile,
    deciding_obligations,
    failed_obligations,
    named_check_outcome,
    obligations_in_reasons,
    read_summary,
)
from tests.mutants.harness import MUTANTS, mutant

PREPARE = "suites/protocol/test_prepare.py::test_prepare_and_unprepare_are_idempotent[v1]"
STATUS = "suites/status/test_status.py::test_driver_status_and_readiness_match_the_scenario[one-device]"
PER_CLAIM = "suites/protocol/test_prepare.py::test_unknown_claim_is_never_reported_prepared"


def test_obligation_ids_are_read_from_the_failure_error_advisory_and_driver_exit_reasons() -> None:
    reasons = [
        "run.driver-stays-up: the driver exited unexpectedly 1 time(s): node-1 exited 2 (signal x.y)",
        "3 check(s) failed: protocol.unprepare-succeeds (2 checks), status.declared-status-written (1 check)",
        "declared capability statusDevices failed its checks",
        "a subset of the bundled suites (only a full selection certifies): 3 check(s) deselected",
    ]
    assert obligations_in_reasons(reasons) == [
        "run.driver-stays-up",
        "protocol.unprepare-succeeds",
        "status.declared-status-written",
    ]
    advisories = [
        "advisory protocol.refusal-is-per-claim (1 finding)",
        "advisory kubelet.cdi-spec-removed-after-unprepare (3 findings)",
        "no contract obligation broke; every declared capability was exercised and passed",
    ]
    assert obligations_in_reasons(advisories) == [
        "protocol.refusal-is-per-claim",
        "kubelet.cdi-spec-removed-after-unprepare",
    ]


def test_reasons_without_obligations_name_none_and_ids_are_listed_once() -> None:
    reasons = [
        "cluster fault: kube-apiserver unhealthy from 20:53:33 (unreachable: x.y failed)",
        "17 check(s) failed or errored during it: not the driver's failures",
        "2 check(s) failed outside it: no registry obligation (1 check), protocol.a-b (1 check)",
        "interrupted after 3 of 9 collected checks: 6 never ran, e.g. suites/status/test_status.py::test_x",
        "1 check(s) could not judge the driver (errors): cluster fault (1 check), protocol.a-b (1 check)",
    ]
    assert obligations_in_reasons(reasons) == ["protocol.a-b"]


def summary(verdict: str, reasons: list[str], **extra: Any) -> dict[str, Any]:
    return {"verdict": verdict, "reasons": reasons, "advisories": [], "tests": {}, "suites": {}, **extra}


def test_failed_tests_name_their_obligation_from_the_suites_table() -> None:
    found = summary(
        "not certified",
        ["2 check(s) failed: protocol.reported-devices-are-allocated (1 check), no registry obligation (1 check)"],
        tests={PREPARE: "failed", STATUS: "failed", PER_CLAIM: "passed"},
        suites={
            "protocol": {"failed": [f"{PREPARE} (protocol.reported-devices-are-allocated)"]},
            "status": {"failed": [STATUS]},
        },
    )
    assert failed_obligations(found) == {PREPARE: "protocol.reported-devices-are-allocated", STATUS: ""}
    assert deciding_obligations(found) == ["protocol.reported-devices-are-allocated"]


def test_an_obligation_only_a_failed_test_names_still_decides() -> None:
    found = summary(
        "not certified",
        ["declared capability statusDevices failed its checks"],
        tests={STATUS: "failed"},
        suites={"status": {"failed": [f"{STATUS} (status.declared-status-written)"]}},
    )
    assert deciding_obligations(found) == ["status.declared-status-written"]


def test_the_named_check_is_found_by_its_test_name_and_a_defensive_finding_shows() -> None:
    found = summary(
        "certified with advisories",
        ["advisory protocol.refusal-is-per-claim (1 finding)"],
        tests={PREPARE: "passed", PER_CLAIM: "passed"},
        advisories=[{"id": "protocol.refusal-is-per-claim", "check": PER_CLAIM}],
    )
    assert named_check_outcome(found, "test_unknown_claim_is_never_reported_prepared") == (
        "passed with advisory protocol.refusal-is-per-claim"
    )
    assert named_check_outcome(found, "test_prepare_and_unprepare_are_idempotent[v1]") == "passed"
    assert named_check_outcome(found, "test_prepare_and_unprepare_are_idempotent[v1alpha4]") == "did not run"
    found["tests"][PREPARE] = "failed"
    assert named_check_outcome(found, "test_prepare_and_unprepare_are_idempotent[v1]") == "failed"


@pytest.mark.parametrize(
    ("mode", "verdict", "result"),
    [
        ("prepares-wrong-device", Verdict.NOT_CERTIFIED, Result.KILLED),
        ("prepares-wrong-device", Verdict.CERTIFIED_WITH_ADVISORIES, Result.DEFENSIVE_ONLY),
        ("prepares-wrong-device", Verdict.CERTIFIED, Result.SURVIVED),
        ("prepares-wrong-device", Verdict.INCOMPLETE, Result.NO_VERDICT),
        ("prepares-wrong-device", None, Result.NO_VERDICT),
        ("fails-whole-call", Verdict.CERTIFIED_WITH_ADVISORIES, Result.EXPECTED_DEFENSIVE_ONLY),
        ("fails-whole-call", Verdict.NOT_CERTIFIED, Result.REFUSES_LEGITIMATE),
        ("fails-whole-call", Verdict.CERTIFIED, Result.SURVIVED),
    ],
)
def test_a_run_is_classified_by_its_verdict_and_whether_the_contract_allows_the_mode(
    mode: str, verdict: str | None, result: Result
) -> None:
    assert classify(mode, verdict) == result


def test_only_certified_non_defensive_modes_refused_legitimate_ones_and_runs_without_verdict_fail_the_bench() -> None:
    assert {r for r in Result if r.fails_the_bench} == {
        Result.SURVIVED,
        Result.REFUSES_LEGITIMATE,
        Result.NO_VERDICT,
    }


def test_the_whole_call_error_is_the_legitimate_mode_and_it_has_a_mutant() -> None:
    assert str(BrokenMode.FAILS_WHOLE_CALL) in LEGITIMATE_UNDER_CONTRACT
    assert set(LEGITIMATE_UNDER_CONTRACT) <= {m.name for m in MUTANTS}


def test_a_run_that_overran_its_deadline_has_no_verdict() -> None:
    done = summary("not certified", [])
    run = AllChecksRun(mutant("prepares-wrong-device"), 1, done, {}, "", 1.0, timed_out=True)
    assert run.result == Result.NO_VERDICT
    assert AllChecksRun(mutant("prepares-wrong-device"), 1, done, {}, "", 1.0).result == Result.KILLED


def test_the_run_is_the_whole_default_suite_with_two_workers_and_a_contract_profile(tmp_path: Path) -> None:
    chosen = mutant("prepares-wrong-device")
    argv = command(chosen, tmp_path)
    assert "-k" not in argv, argv
    assert argv[argv.index("-n") + 1] == "2", argv
    assert not any(arg.startswith("suites") or arg.endswith("/suites") for arg in argv), argv
    profile = yaml.safe_load(contract_profile(chosen, tmp_path).read_text())
    assert profile["strictness"] == "contract", profile
    assert "--broken-mode=prepares-wrong-device" in profile["run"]["args"], profile["run"]["args"]


def test_the_summary_is_read_from_the_one_run_directory_not_the_allure_copy(tmp_path: Path) -> None:
    run = tmp_path / "20261201-000000-abcd"
    (run / "allure-report").mkdir(parents=True)
    (run / "allure-report" / "summary.json").write_text("{}")
    assert read_summary(tmp_path) is None
    (run / "summary.json").write_text(json.dumps(summary("certified", [])))
    assert read_summary(tmp_path) == summary("certified", [])

"""bench/mutants --all-checks reads the obligations that decided a whole-suite run, and classifies the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance.driver.profile import Strictness
from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.verdict import Verdict
from tests.mutants.all_checks import (
    AllChecksRun,
    MutantVerdicts,
    Result,
    basis_of,
    classify,
    command,
    deciding_obligations,
    failed_obligations,
    named_check_outcome,
    needs_strict_run,
    obligations_in_reasons,
    read_summary,
    strictness_profile,
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
        "2 check(s) could not judge the driver (errors): run.harness-error (2 checks)",
    ]
    assert obligations_in_reasons(reasons) == ["protocol.a-b"], "a harness error decides nothing about the driver"
    silent = ["run.driver-answers: the driver on kwok-node-0 did not answer from 12:00:00 to 12:01:00 (30 probes)"]
    assert obligations_in_reasons(silent) == ["run.driver-answers"]


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


CONTRACT, DEFENSIVE = Basis.CONTRACT, Basis.DEFENSIVE
NOT, ADVISED, PLAIN = Verdict.NOT_CERTIFIED, Verdict.CERTIFIED_WITH_ADVISORIES, Verdict.CERTIFIED


@pytest.mark.parametrize(
    ("basis", "contract", "strict", "advised", "result"),
    [
        (CONTRACT, NOT, None, False, Result.KILLED),
        (CONTRACT, ADVISED, None, True, Result.CONTRACT_BUG_CERTIFIED),
        (CONTRACT, PLAIN, None, False, Result.SURVIVED),
        (CONTRACT, Verdict.INCOMPLETE, None, False, Result.NO_VERDICT),
        (CONTRACT, None, None, False, Result.NO_VERDICT),
        # A defensive bug that also breaks a contract obligation elsewhere is refused under contract strictness.
        (DEFENSIVE, NOT, None, False, Result.KILLED),
        (DEFENSIVE, ADVISED, NOT, True, Result.KILLED_UNDER_STRICT),
        (DEFENSIVE, ADVISED, NOT, False, Result.ADVISORY_MISSING),
        (DEFENSIVE, ADVISED, ADVISED, True, Result.SURVIVED),
        (DEFENSIVE, ADVISED, None, True, Result.NO_VERDICT),
        (DEFENSIVE, PLAIN, None, False, Result.SURVIVED),
    ],
)
def test_a_mutant_is_refused_under_the_strictness_its_obligations_basis_calls_for(
    basis: Basis, contract: str | None, strict: str | None, advised: bool, result: Result
) -> None:
    assert classify(basis, contract, strict, advised) == result


def test_only_refusals_as_the_basis_says_pass_the_bench() -> None:
    assert {r for r in Result if not r.fails_the_bench} == {Result.KILLED, Result.KILLED_UNDER_STRICT}


def test_every_mutant_breaks_a_contract_or_defensive_obligation_of_the_registry() -> None:
    registry = Registry.load()
    bases = {m.name: basis_of(m, registry) for m in MUTANTS}
    assert set(bases.values()) <= {CONTRACT, DEFENSIVE}, bases


def test_a_mutant_naming_a_harness_obligation_is_refused() -> None:
    harness = next(o for o in Registry.load() if o.basis == Basis.HARNESS)
    chosen = mutant("prepares-wrong-device")
    with pytest.raises(ValueError, match="harness obligation"):
        basis_of(type(chosen)(chosen.name, chosen.killed_by, harness.id), Registry.load())


def _run(verdict: str, strictness: Strictness = Strictness.CONTRACT, **extra: Any) -> AllChecksRun:
    return AllChecksRun(mutant("ready-before-prepared"), strictness, 1, summary(verdict, [], **extra), {}, "", 1.0)


def test_only_a_defensive_bug_certified_with_advisories_is_run_again_under_strict() -> None:
    assert needs_strict_run(DEFENSIVE, _run(ADVISED))
    assert not needs_strict_run(DEFENSIVE, _run(NOT))
    assert not needs_strict_run(CONTRACT, _run(ADVISED))


def test_a_defensive_mutant_is_refused_by_its_strict_run_naming_its_advisory() -> None:
    breaks = mutant("ready-before-prepared").breaks
    contract = _run(ADVISED, advisories=[{"id": breaks, "check": "x"}])
    strict = AllChecksRun(
        mutant("ready-before-prepared"),
        Strictness.STRICT,
        1,
        summary(NOT, [f"1 check(s) failed: {breaks} (1 check)"]),
        {},
        "",
        1.0,
    )
    verdicts = MutantVerdicts(mutant("ready-before-prepared"), DEFENSIVE, contract, strict)
    assert verdicts.result == Result.KILLED_UNDER_STRICT
    assert verdicts.deciding is strict
    assert verdicts.named_its_obligation


def test_a_run_that_overran_its_deadline_has_no_verdict() -> None:
    done = summary("not certified", [])
    chosen = mutant("prepares-wrong-device")
    run = AllChecksRun(chosen, Strictness.CONTRACT, 1, done, {}, "", 1.0, timed_out=True)
    assert run.verdict is None
    assert MutantVerdicts(chosen, CONTRACT, run).result == Result.NO_VERDICT
    finished = AllChecksRun(chosen, Strictness.CONTRACT, 1, done, {}, "", 1.0)
    assert MutantVerdicts(chosen, CONTRACT, finished).result == Result.KILLED


@pytest.mark.parametrize("strictness", list(Strictness))
def test_the_run_is_the_whole_default_suite_with_two_workers_and_the_given_strictness(
    tmp_path: Path, strictness: Strictness
) -> None:
    chosen = mutant("prepares-wrong-device")
    argv = command(chosen, tmp_path, strictness)
    assert "-k" not in argv, argv
    assert argv[argv.index("-n") + 1] == "2", argv
    assert not any(arg.startswith("suites") or arg.endswith("/suites") for arg in argv), argv
    profile = yaml.safe_load(strictness_profile(chosen, tmp_path, strictness).read_text())
    assert profile["strictness"] == str(strictness), profile
    assert "--broken-mode=prepares-wrong-device" in profile["run"]["args"], profile["run"]["args"]


def test_the_summary_is_read_from_the_one_run_directory_not_the_allure_copy(tmp_path: Path) -> None:
    run = tmp_path / "20261201-000000-abcd"
    (run / "allure-report").mkdir(parents=True)
    (run / "allure-report" / "summary.json").write_text("{}")
    assert read_summary(tmp_path) is None
    (run / "summary.json").write_text(json.dumps(summary("certified", [])))
    assert read_summary(tmp_path) == summary("certified", [])

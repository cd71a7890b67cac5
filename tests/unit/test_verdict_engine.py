"""The verdict engine alone: typed findings in, one verdict out, with neither pytest's plugin nor a cluster.

This module imports only `dra_conformance.verdict` at the top; the engine's purity is checked in a fresh
interpreter (pytest itself may load the plugin through its entry point), and the tests here pass with it disabled:
`pytest -p no:dra_conformance tests/unit/test_verdict_engine.py`. The CLI tests at the end import the CLI (and the
summary's writer) inside the test, to decide a saved run again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.verdict import (
    CLUSTER_FAULT,
    DRIVER_ANSWERS,
    DRIVER_STAYS_UP,
    FINDINGS_JSON,
    HARNESS_ERROR,
    RULES,
    WORKER_CRASH,
    CheckResult,
    Findings,
    FindingsError,
    Outcome,
    Selection,
    Verdict,
    judge,
)

PASS = CheckResult("suites/protocol/test_p.py::t", Outcome.PASSED, capabilities=("prepare",))
OTHER = CheckResult("suites/status/test_s.py::t", Outcome.PASSED)
FAIL = CheckResult("suites/status/test_s.py::f", Outcome.FAILED, "broke", ("prepare",), "status.x", "prepare")
ERROR = CheckResult("suites/status/test_s.py::e", Outcome.ERROR, "setup broke", (), "run.harness-precondition")
METRICS_FAIL = CheckResult("suites/metrics/test_m.py::m", Outcome.FAILED, "no window", (), "metrics.window")
UNEXPECTED_EXIT = {"describe": "gpu-driver on kwok-node-0 exited with code 1", "caused_by_suite": False}
THE_SUITES_KILL = {"describe": "gpu-driver on kwok-node-1 killed by SIGKILL", "caused_by_suite": True}
ADVISORY = {"id": "defensive.y", "check": "suites/status/test_s.py::t", "obligation": "y", "observed": "z"}


def _findings(*checks: CheckResult, **rest: Any) -> Findings:
    """A whole run's findings (what `rest` does not say): every check collected ran; the profile declares `prepare`."""
    whole = Findings(list(checks), ("prepare", "referenceFaults"), selection=Selection(tuple(c.nodeid for c in checks)))
    return replace(whole, **rest)


def test_importing_the_engine_loads_neither_pytest_nor_the_plugin_nor_a_cluster_client() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, dra_conformance.verdict; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    engine = sorted(m for m in loaded if m.startswith("dra_conformance."))
    assert all(m.startswith(("dra_conformance.verdict", "dra_conformance.model")) for m in engine), engine
    heavy = [m for m in loaded if m.split(".")[0] in ("pytest", "_pytest", "kubernetes", "grpc", "yaml")]
    assert not heavy, heavy


def test_every_check_passing_and_every_capability_proven_is_certified() -> None:
    verdict, reasons = judge(_findings(PASS, OTHER))
    assert verdict == Verdict.CERTIFIED, reasons
    assert reasons == [
        "every check passed or is not applicable with its reason; every declared capability was exercised and passed"
    ]


def test_defensive_findings_certify_with_advisories_named_first() -> None:
    verdict, reasons = judge(_findings(PASS, advisories=[ADVISORY, ADVISORY]))
    assert verdict == Verdict.CERTIFIED_WITH_ADVISORIES, reasons
    assert reasons[0] == "advisory defensive.y (2 findings)", reasons


def test_a_broken_obligation_is_not_certified_and_fails_its_capability() -> None:
    verdict, reasons = judge(_findings(PASS, FAIL))
    assert verdict == Verdict.NOT_CERTIFIED, reasons
    assert reasons == ["1 check(s) failed: status.x (1 check)", "declared capability prepare failed its checks"]


@pytest.mark.parametrize(
    ("findings", "reason"),
    [
        (_findings(PASS, ERROR), "1 check(s) could not judge the driver (errors): run.harness-precondition (1 check)"),
        (_findings(PASS, CheckResult("suites/a/test_a.py::s", Outcome.SKIPPED)), "1 test(s) skipped without a reason"),
        (_findings(OTHER), "declared capability prepare: no check in this suite"),
        (
            _findings(PASS, CheckResult("suites/a/t.py::n", Outcome.NOT_APPLICABLE, "x the suite's identity cannot")),
            "1 check(s) not run because the suite's identity lacks rights",
        ),
        (_findings(PASS, selection=Selection(("suites/a/t.py::gone", PASS.nodeid))), "interrupted after 1 of 2"),
        (_findings(PASS, selection=Selection((PASS.nodeid,), filtered_by="-k 'x'")), "a subset of the bundled suites"),
        (_findings(PASS, cluster_faults=["etcd down 12:00-12:01"]), f"{CLUSTER_FAULT}: etcd down 12:00-12:01"),
    ],
    ids=["error", "silent-skip", "unproven", "identity", "never-run", "subset", "cluster-fault"],
)
def test_what_the_run_could_not_judge_is_incomplete(findings: Findings, reason: str) -> None:
    verdict, reasons = judge(findings)
    assert verdict == Verdict.INCOMPLETE, reasons
    assert reasons[0].startswith(reason), reasons


def test_the_rules_are_data_in_the_order_of_precedence() -> None:
    assert [rule.verdict for rule in RULES] == [
        Verdict.NOT_CERTIFIED,
        Verdict.INCOMPLETE,
        Verdict.NOT_CERTIFIED,
        Verdict.INCOMPLETE,
        Verdict.INCOMPLETE,
        Verdict.CERTIFIED_WITH_ADVISORIES,
        Verdict.CERTIFIED,
    ], RULES
    assert all(rule.when for rule in RULES), RULES


def test_an_unexpected_driver_exit_or_silence_decides_before_a_cluster_fault() -> None:
    exited = _findings(PASS, FAIL, driver_exits=[UNEXPECTED_EXIT, THE_SUITES_KILL], cluster_faults=["etcd down"])
    verdict, reasons = judge(exited)
    assert verdict == Verdict.NOT_CERTIFIED, reasons
    assert reasons[0] == f"{DRIVER_STAYS_UP}: the driver exited unexpectedly 1 time(s): {UNEXPECTED_EXIT['describe']}"
    assert reasons[1] == "1 check(s) failed: status.x (1 check)", reasons
    silent = judge(_findings(PASS, driver_silences=["the driver on kwok-node-0 did not answer"]))
    assert silent == (Verdict.NOT_CERTIFIED, [f"{DRIVER_ANSWERS}: the driver on kwok-node-0 did not answer"])


def test_the_suites_own_kills_decide_nothing() -> None:
    assert judge(_findings(PASS, driver_exits=[THE_SUITES_KILL]))[0] == Verdict.CERTIFIED


def test_a_cluster_fault_decides_before_a_failure_and_lists_it() -> None:
    during = replace(FAIL, nodeid="suites/status/test_s.py::during", outcome=Outcome.ERROR, obligation=CLUSTER_FAULT)
    verdict, reasons = judge(_findings(PASS, FAIL, during, cluster_faults=["kube-scheduler down"]))
    assert verdict == Verdict.INCOMPLETE, reasons
    assert reasons == [
        f"{CLUSTER_FAULT}: kube-scheduler down",
        "1 check(s) failed or errored during it: not the driver's failures",
        "1 check(s) failed outside it: status.x (1 check)",
    ]


def test_a_failure_decides_before_an_incomplete_selection_which_it_still_names() -> None:
    findings = _findings(PASS, FAIL, selection=Selection((PASS.nodeid, FAIL.nodeid, "suites/a/t.py::gone")))
    verdict, reasons = judge(findings)
    assert verdict == Verdict.NOT_CERTIFIED, reasons
    assert reasons[-1].startswith("interrupted after 2 of 3 collected checks"), reasons


def test_an_incomplete_selection_decides_before_errors_and_names_a_crashed_worker() -> None:
    crashed = CheckResult("suites/a/t.py::c", Outcome.ERROR, "node gw0 crashed", (), WORKER_CRASH)
    findings = _findings(PASS, crashed, selection=Selection((PASS.nodeid, crashed.nodeid, "suites/a/t.py::gone")))
    verdict, reasons = judge(findings)
    assert verdict == Verdict.INCOMPLETE, reasons
    assert reasons[1] == f"{WORKER_CRASH}: node gw0 crashed", reasons


def test_advisories_never_rescue_an_error_and_a_harness_error_is_never_the_drivers_failure() -> None:
    unnamed = CheckResult("suites/a/t.py::raised", Outcome.FAILED, "KeyError: 'x'")
    verdict, reasons = judge(_findings(PASS, unnamed, advisories=[ADVISORY]))
    assert verdict == Verdict.INCOMPLETE, reasons
    assert reasons == [f"1 check(s) could not judge the driver (errors): {HARNESS_ERROR} (1 check)"], reasons


def test_the_metrics_api_checks_never_decide_the_drivers_verdict() -> None:
    assert judge(_findings(PASS, METRICS_FAIL))[0] == Verdict.CERTIFIED


def test_findings_decide_the_same_after_their_record_is_read_back() -> None:
    findings = _findings(
        PASS,
        FAIL,
        ERROR,
        advisories=[ADVISORY],
        cluster_faults=[],
        driver_exits=[THE_SUITES_KILL],
        selection=Selection((PASS.nodeid, FAIL.nodeid, ERROR.nodeid), 2, ("rbac",), "", "-k 'status'"),
    )
    read = Findings.from_json(json.loads(json.dumps(findings.to_json())))
    assert read == findings
    assert judge(read) == judge(findings)


@pytest.mark.parametrize(
    "document",
    [[], {"format": 99, "checks": []}, {"format": 1}, {"format": 1, "checks": [{"nodeid": "x", "outcome": "meh"}]}],
    ids=["not-an-object", "other-format", "no-checks", "bad-outcome"],
)
def test_a_malformed_record_is_refused_in_one_error(document: object) -> None:
    with pytest.raises(FindingsError):
        Findings.from_json(document)


# `dra-conformance verdict RUN`: a saved run's verdict decided again.


def _saved_run(run_dir: Path, findings: Findings, recorded: str) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / FINDINGS_JSON).write_text(json.dumps(findings.to_json()))
    (run_dir / "verdict.json").write_text(json.dumps({"verdict": recorded, "totals": {}}))
    return run_dir


def test_the_verdict_command_agrees_with_the_run_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dra_conformance.cli import main

    _saved_run(tmp_path / "reports" / "20261206-010000-abcd", _findings(PASS, FAIL), "not certified")
    assert main(["verdict", "20261206-010000-abcd", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("verdict: not certified (decided again from "), out
    assert "  1 check(s) failed: status.x (1 check)" in out, out


def test_the_verdict_command_says_in_one_line_when_the_verdicts_differ_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dra_conformance.cli import main

    run_dir = _saved_run(tmp_path / "run", _findings(PASS), "not certified")
    assert main(["verdict", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"dra-conformance verdict: the findings decide 'certified', but the run recorded 'not certified' "
        f"({run_dir / 'verdict.json'})"
    ], err


@pytest.mark.parametrize("broken", ["no-findings", "not-json", "no-recorded-verdict", "no-run"])
def test_the_verdict_command_refuses_a_missing_or_malformed_record_in_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: str
) -> None:
    from dra_conformance.cli import main

    run_dir = _saved_run(tmp_path / "run", _findings(PASS), "certified")
    if broken == "no-findings":
        (run_dir / FINDINGS_JSON).unlink()
    elif broken == "not-json":
        (run_dir / FINDINGS_JSON).write_text("{")
    elif broken == "no-recorded-verdict":
        (run_dir / "verdict.json").unlink()
    else:
        run_dir = tmp_path / "nowhere"
    assert main(["verdict", str(run_dir), "--reports-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("dra-conformance"), captured.err


def test_a_run_written_by_the_summary_is_decided_again_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dra_conformance.cli import main
    from dra_conformance.model.findings import RECORD_KIND
    from dra_conformance.model.records import RunRecords
    from dra_conformance.report.certification import findings_of, summarize, write_summary
    from dra_conformance.verdict import RunFacts

    facts = RunFacts("0.1.0", "local", None, "d", "p.yaml", "abc", None, ("prepare", "referenceFaults"))
    RunRecords(tmp_path, "main").add(RECORD_KIND, ADVISORY)
    results = [PASS, OTHER, METRICS_FAIL]
    selection = Selection(tuple(r.nodeid for r in results))
    exits = [{**THE_SUITES_KILL, "log_tail": "bye"}]
    summary = summarize(results, facts, tmp_path, None, selection, [], exits, [])
    assert summary["verdict"] == Verdict.CERTIFIED_WITH_ADVISORIES, summary["reasons"]
    assert write_summary(summary, tmp_path, findings_of(results, facts, tmp_path, selection, [], exits, [])) is None
    assert main(["verdict", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict: certified with advisories ("), out
    assert out.splitlines()[1:-1] == [f"  {reason}" for reason in summary["reasons"]], out

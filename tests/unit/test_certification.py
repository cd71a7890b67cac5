"""The certification verdict: failures, silent skips and unexercised capabilities each decide it differently."""

from __future__ import annotations

import json
from pathlib import Path

from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.model.records import RunRecords
from dra_conformance.report import certification, harness_errors
from dra_conformance.report.certification import merge, outcome_of, render_markdown, summarize, terminal_lines
from dra_conformance.report.harness_errors import HARNESS_ERROR
from dra_conformance.verdict import CLUSTER_FAULT, CheckResult, Outcome, RunFacts, Selection

FACTS = RunFacts(
    "0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", ("healthStream", "referenceFaults")
)


def _result(nodeid: str, outcome: Outcome, reason: str = "", capabilities: tuple[str, ...] = ()) -> CheckResult:
    # A failure names the obligation that broke: one without is a harness error (see the tests of run.harness-error).
    return CheckResult(nodeid, outcome, reason, capabilities, "protocol.x" if outcome == Outcome.FAILED else "")


def test_skip_reasons_split_into_not_applicable_and_skipped() -> None:
    assert outcome_of("setup", False, True, "Skipped: not applicable: no real node") == (
        Outcome.NOT_APPLICABLE,
        "not applicable: no real node",
    )
    assert outcome_of("call", False, True, "Skipped: flaky on CI") == (Outcome.SKIPPED, "flaky on CI")
    assert outcome_of("setup", True, False, "") is None, "a passed setup says nothing yet"
    assert outcome_of("call", True, False, "") == (Outcome.PASSED, "")


def test_a_teardown_failure_after_a_pass_fails_the_test_and_a_failure_is_never_overwritten() -> None:
    passed = merge(None, "t", (Outcome.PASSED, ""), ("healthStream",))
    failed = merge(passed, "t", (Outcome.FAILED, "leak"), ())
    assert failed.outcome == Outcome.FAILED and failed.capabilities == ("healthStream",)
    assert merge(failed, "t", (Outcome.PASSED, ""), ()).outcome == Outcome.FAILED


def test_all_passing_with_every_capability_exercised_is_certified(tmp_path: Path) -> None:
    results = [
        _result("suites/protocol/test_health.py::t", Outcome.PASSED, capabilities=("healthStream",)),
        _result("suites/kubelet/test_k.py::t", Outcome.NOT_APPLICABLE, "not applicable: no real node"),
    ]
    summary = summarize(results, FACTS, tmp_path)
    assert summary["verdict"] == "certified", summary["reasons"]
    assert "referenceFaults" not in summary["capabilities"], "a harness capability is not the driver's to certify"
    assert summary["suites"]["kubelet"]["reasons"] == [{"reason": "not applicable: no real node", "tests": 1}]


def test_a_failure_means_not_certified(tmp_path: Path) -> None:
    results = [_result("suites/protocol/test_health.py::t", Outcome.FAILED, capabilities=("healthStream",))]
    summary = summarize(results, FACTS, tmp_path)
    assert summary["verdict"] == "not certified"
    assert "declared capability healthStream failed its checks" in summary["reasons"]
    assert terminal_lines(summary)[0].startswith("verdict: not certified")


def test_an_unexercised_capability_or_a_silent_skip_is_incomplete_not_a_failure(tmp_path: Path) -> None:
    health = "suites/protocol/test_health.py::t"
    skipped = _result(health, Outcome.NOT_APPLICABLE, "not applicable: x", ("healthStream",))
    summary = summarize([skipped], FACTS, tmp_path)
    assert summary["verdict"] == "incomplete"
    assert summary["capabilities"]["healthStream"]["state"] == "not exercised here"
    silent = summarize(
        [_result("a", Outcome.SKIPPED), _result("b", Outcome.PASSED, capabilities=("healthStream",))], FACTS, tmp_path
    )
    assert silent["verdict"] == "incomplete" and "without a reason" in silent["reasons"][0]
    assert "# gpu.example.com: incomplete" in render_markdown(silent)


def test_summary_names_the_suite_cluster_driver_and_profile_versions(tmp_path: Path) -> None:
    summary = summarize([_result("suites/status/test_x.py::t", Outcome.PASSED)], FACTS, tmp_path)
    identity = render_markdown(summary)
    expected = "Suite dra-conformance 0.1.0, backend local (Kubernetes v1.37.2), profile p.yaml (sha256 abc), driver"
    assert expected in identity, identity


def test_failures_are_named_by_the_obligation_that_broke(tmp_path: Path) -> None:
    failed = CheckResult("suites/status/t.py::t", Outcome.FAILED, "", ("healthStream",), "status.unprepare-succeeds")
    summary = summarize([failed, failed], FACTS, tmp_path)
    assert summary["verdict"] == "not certified"
    assert summary["reasons"][0] == "2 check(s) failed: status.unprepare-succeeds (2 checks)", summary["reasons"]


def test_a_broken_obligation_about_another_capability_does_not_fail_the_checks_marker_capability(
    tmp_path: Path,
) -> None:
    facts = RunFacts("0.1.0", "local", None, "d", "p.yaml", "abc", None, ("adminAccess", "statusDevices"))
    admin = CheckResult("suites/status/t.py::admin", Outcome.FAILED, "", ("adminAccess",), "status.x", "statusDevices")
    passing = CheckResult("suites/allocation/t.py::admin", Outcome.PASSED, "", ("adminAccess", "statusDevices"))
    capabilities = summarize([admin, passing], facts, tmp_path)["capabilities"]
    assert capabilities["adminAccess"]["state"] == "passed", capabilities
    assert capabilities["statusDevices"]["state"] == "failed", capabilities


def test_a_harness_error_or_a_failed_setup_is_incomplete_and_never_a_capability_failure(tmp_path: Path) -> None:
    assert outcome_of("call", False, False, "x", "harness") == (Outcome.ERROR, "x")
    assert outcome_of("setup", False, False, "connection refused") == (Outcome.ERROR, "connection refused")
    assert outcome_of("setup", False, False, "x", "contract") == (Outcome.FAILED, "x")
    assert outcome_of("teardown", False, False, "leak", "contract") == (Outcome.FAILED, "leak")
    assert outcome_of("teardown", False, False, "leak") == (Outcome.ERROR, "leak"), "no obligation: a harness error"
    errored = merge(None, "suites/protocol/test_health.py::t", (Outcome.ERROR, "x"), ("healthStream",), ("h.y", ""))
    summary = summarize([errored], FACTS, tmp_path)
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert summary["reasons"][0] == "1 check(s) could not judge the driver (errors): h.y (1 check)"
    assert summary["capabilities"]["healthStream"]["state"] != "failed"
    assert merge(errored, errored.nodeid, (Outcome.FAILED, "leak"), ()).outcome == Outcome.FAILED
    assert merge(errored, errored.nodeid, (Outcome.PASSED, ""), ()).outcome == Outcome.ERROR


def test_advisories_certify_with_advisories_listed_first(tmp_path: Path) -> None:
    RunRecords(tmp_path, "gw0").add(
        "advisories",
        {"id": "status.ready-condition-true", "check": "c", "obligation": "Ready", "source": "s", "observed": "[]"},
    )
    results = [_result("suites/protocol/test_health.py::t", Outcome.PASSED, capabilities=("healthStream",))]
    summary = summarize(results, FACTS, tmp_path)
    assert summary["verdict"] == "certified with advisories", summary["reasons"]
    assert summary["reasons"][0] == "advisory status.ready-condition-true (1 finding)"
    markdown = render_markdown(summary).splitlines()
    assert markdown[0] == "# gpu.example.com: certified with advisories"
    assert markdown.index("## Advisories (defensive obligations; they fail only with --dra-strictness strict)") < (
        markdown.index("## Declared capabilities")
    )


def test_an_interrupted_run_is_incomplete_with_its_counts_even_when_everything_that_ran_passed(
    tmp_path: Path,
) -> None:
    ran = [
        _result(f"suites/protocol/test_p.py::t{i}", Outcome.PASSED, capabilities=("healthStream",)) for i in range(3)
    ]
    selection = Selection(collected=tuple(f"suites/protocol/test_p.py::t{i}" for i in range(5)), stopped="interrupted")
    summary = summarize(ran, FACTS, tmp_path, selection=selection)
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert summary["reasons"][0].startswith("interrupted after 3 of 5 collected checks (interrupted): 2 never ran")
    assert summary["accounting"] == {
        "collected": 5,
        "finished": 3,
        "never_run": 2,
        "deselected": 0,
        "suites_not_run": [],
    }
    assert "  checks: 5 collected, 3 finished, 2 never ran, 0 deselected" in terminal_lines(summary)


def test_a_subset_never_certifies_and_says_what_it_left_out(tmp_path: Path) -> None:
    ran = [_result("suites/protocol/test_p.py::t", Outcome.PASSED, capabilities=("healthStream",))]
    subset = Selection(collected=("suites/protocol/test_p.py::t",), deselected=7, suites_not_run=("metrics", "rbac"))
    summary = summarize(ran, FACTS, tmp_path, selection=subset)
    assert summary["verdict"] == "incomplete"
    assert summary["reasons"] == [
        "a subset of the bundled suites (only a full selection certifies): 7 check(s) deselected; "
        "suites not run: metrics, rbac"
    ]
    failed = [_result("suites/protocol/test_p.py::t", Outcome.FAILED, capabilities=("healthStream",))]
    assert summarize(failed, FACTS, tmp_path, selection=subset)["verdict"] == "not certified", "a failure still decides"


def test_a_cluster_fault_makes_the_run_incomplete_and_fails_no_capability(tmp_path: Path) -> None:
    during = CheckResult(
        "suites/protocol/test_health.py::t", Outcome.ERROR, "cluster fault: x", ("healthStream",), CLUSTER_FAULT
    )
    fault = "kube-apiserver unhealthy from 12:00:01 until the end of the run (unreachable: Connection refused)"
    summary = summarize([during], FACTS, tmp_path, cluster_faults=[fault])
    assert summary["verdict"] == "incomplete"
    assert summary["reasons"][:2] == [
        f"cluster fault: {fault}",
        "1 check(s) failed or errored during it: not the driver's failures",
    ]
    assert summary["capabilities"]["healthStream"]["state"] != "failed"


def test_an_unexpected_driver_exit_decides_the_verdict_and_the_suites_own_kills_do_not(tmp_path: Path) -> None:
    passed = [_result("suites/protocol/test_health.py::t", Outcome.PASSED, capabilities=("healthStream",))]
    ours = {"node": "kwok-set-aside-0", "code": -9, "caused_by_suite": True, "describe": "x", "log_tail": ""}
    assert summarize(passed, FACTS, tmp_path, driver_exits=[ours])["verdict"] == "certified"
    crash = {
        "node": "kwok-node-0",
        "code": -9,
        "caused_by_suite": False,
        "describe": "kwok-node-0: killed by signal 9",
        "log_tail": "prepared claim c1",
    }
    summary = summarize(passed, FACTS, tmp_path, driver_exits=[ours, crash])
    assert summary["verdict"] == "not certified"
    assert summary["reasons"][0] == (
        "run.driver-stays-up: the driver exited unexpectedly 1 time(s): kwok-node-0: killed by signal 9"
    )
    assert "## The driver exited unexpectedly: kwok-node-0: killed by signal 9" in render_markdown(summary)


def test_checks_the_suites_identity_could_not_run_make_the_run_incomplete(tmp_path: Path) -> None:
    reason = "not applicable: the suite's identity cannot create deviceclasses.resource.k8s.io"
    results = [
        _result("suites/protocol/test_health.py::t", Outcome.PASSED, capabilities=("healthStream",)),
        _result("suites/allocation/test_a.py::t", Outcome.NOT_APPLICABLE, reason),
    ]
    summary = summarize(results, FACTS, tmp_path)
    assert summary["verdict"] == "incomplete"
    assert summary["reasons"][0] == f"1 check(s) not run because the suite's identity lacks rights, e.g. {reason}"


def test_the_check_a_crashed_worker_was_running_is_an_error_not_a_driver_failure() -> None:
    crashed = "worker 'gw0' crashed while running 'suites/protocol/test_p.py::t'"
    assert outcome_of("???", False, False, crashed) == (Outcome.ERROR, crashed)


def test_a_kubelet_suite_without_a_real_node_gets_one_line_with_why_and_what_runs_it() -> None:
    summary = {
        "run": {"backend": "local", "extra": {"real_node_absent": "not root (the real node needs root)"}},
        "suites": {"kubelet": {}},
    }
    line = certification.real_node_line(summary)
    assert line is not None and "not root" in line and "dra-conformance run --real-node" in line, line
    assert certification.real_node_line({**summary, "suites": {"protocol": {}}}) is None, "no kubelet suite ran"
    assert certification.real_node_line({**summary, "run": {"backend": "local", "extra": {}}}) is None


KEY_ERROR = "suites/protocol/test_p.py::test_key_error"
TRACEBACK = (
    "def test_key_error():\n>       {}['missing']\nE       KeyError: 'missing'\n\nsuites/protocol/test_p.py:3: KeyError"
)


def test_a_failure_that_names_no_obligation_is_a_harness_error_with_its_traceback_and_the_run_incomplete(
    tmp_path: Path,
) -> None:
    assert outcome_of("call", False, False, "KeyError: 'missing'") == (Outcome.ERROR, "KeyError: 'missing'")
    errored = merge(
        None, KEY_ERROR, (Outcome.ERROR, "KeyError: 'missing'"), ("healthStream",), (HARNESS_ERROR, ""), TRACEBACK
    )
    # A failure without an obligation, as older records or another collector give it, is one too.
    bare = CheckResult("suites/status/test_s.py::test_bare_assert", Outcome.FAILED, "assert 1 == 2", ("healthStream",))
    passed = _result("suites/protocol/test_health.py::t", Outcome.PASSED, capabilities=("healthStream",))
    summary = summarize([errored, bare, passed], FACTS, tmp_path)
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert summary["reasons"][0] == f"2 check(s) could not judge the driver (errors): {HARNESS_ERROR} (2 checks)"
    assert summary["capabilities"]["healthStream"]["state"] == "passed", summary["capabilities"]
    assert summary["totals"] == {"error": 2, "passed": 1}, summary["totals"]
    assert [(e["check"], e["obligation"], e["error"]) for e in summary["harness_errors"]] == [
        (KEY_ERROR, HARNESS_ERROR, "KeyError: 'missing'"),
        ("suites/status/test_s.py::test_bare_assert", HARNESS_ERROR, "assert 1 == 2"),
    ], summary["harness_errors"]
    assert summary["harness_errors"][0]["traceback"] == TRACEBACK
    markdown = render_markdown(summary)
    assert f"## Harness errors ({HARNESS_ERROR}" in markdown and "E       KeyError: 'missing'" in markdown, markdown
    assert "no registry obligation" not in json.dumps(summary) + markdown


def test_every_failure_and_error_in_the_summary_names_an_obligation_id(tmp_path: Path) -> None:
    results = [
        CheckResult("suites/protocol/test_p.py::a", Outcome.FAILED, "", (), "protocol.unprepare-succeeds"),
        CheckResult("suites/protocol/test_p.py::b", Outcome.FAILED, "KeyError: 'x'"),
        CheckResult("suites/protocol/test_p.py::c", Outcome.ERROR, "fixture broke"),
        CheckResult("suites/protocol/test_p.py::d", Outcome.PASSED),
    ]
    summary = summarize(results, FACTS, tmp_path)
    assert summary["verdict"] == "not certified", "an obligation's failure still decides"
    assert summary["reasons"][0] == "1 check(s) failed: protocol.unprepare-succeeds (1 check)", summary["reasons"]
    assert f"2 harness error(s) ({HARNESS_ERROR}), e.g. suites/protocol/test_p.py::b" in summary["reasons"]
    named = [*summary["suites"]["protocol"]["failed"], *summary["suites"]["protocol"]["errors"]]
    assert named == [
        "suites/protocol/test_p.py::a (protocol.unprepare-succeeds)",
        f"suites/protocol/test_p.py::b ({HARNESS_ERROR})",
        f"suites/protocol/test_p.py::c ({HARNESS_ERROR})",
    ], named
    assert HARNESS_ERROR in Registry.load().obligations, "the harness obligation is in the registry"
    assert Registry.load()[HARNESS_ERROR].basis == Basis.HARNESS


def test_a_harness_errors_traceback_keeps_its_end_and_says_what_was_cut() -> None:
    long = "frame\n" * 2000 + "E   KeyError: 'missing'"
    kept = harness_errors.trimmed(long)
    assert kept.endswith("E   KeyError: 'missing'") and len(kept) < harness_errors.TRACEBACK_CHARS + 100, kept[:200]
    assert kept.startswith(f"[{len(long) - harness_errors.TRACEBACK_CHARS} characters of the traceback cut]")
    assert harness_errors.trimmed(TRACEBACK) == TRACEBACK

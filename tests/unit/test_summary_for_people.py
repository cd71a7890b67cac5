"""The summary a person reads: the four-layer line, tables instead of reprs, each caveat once, where and what next."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dra_conformance.canary.inputs import Inputs
from dra_conformance.canary.rules import Policy, evaluate
from dra_conformance.kubelet.layers import RECORD_KIND, Answer, FourLayerRecord, Layer, LayerAnswer
from dra_conformance.model.records import RunRecords
from dra_conformance.report.certification import render_markdown, summarize, terminal_lines
from dra_conformance.verdict import CheckResult, Outcome, RunFacts

FACTS = RunFacts(
    "0.1.0",
    "local",
    "v1.37.2",
    "gpu.example.com",
    "p.yaml",
    "abc",
    "2.0.0",
    ("healthStream",),
    extra={"rerun": "dra-conformance run --profile p.yaml", "strictness": "contract"},
)
FOUR_LAYERS = "suites/kubelet/test_four_layers.py::test_every_layer_before_the_broken_one_passes"
CASES = {
    "all-four-green": None,
    "allocated-but-prepare-failed": Layer.DRIVER_STATUS,
    "status-ready-but-container-lacks-device": Layer.READINESS,
    "ready-but-job-fails": Layer.JOB_OUTCOME,
}


def _four_layer_records(run_dir: Path) -> list[CheckResult]:
    records = RunRecords(run_dir, "gw0")
    results = []
    for case, broken in CASES.items():
        record = FourLayerRecord(f"ns/job-{case}")
        for layer in Layer:
            answer = Answer.FAILED if layer == broken else Answer.OK
            record.update(layer, LayerAnswer(answer, f"{layer} seen"))
        # In a real run the check carries its xdist group: `...[case]@real-node`.
        nodeid = f"{FOUR_LAYERS}[{case}]@real-node"
        records.add(RECORD_KIND, {"check": nodeid, "record": record.to_json()})
        # The case meant to break its job outcome: the check itself failed here (the record named another layer).
        outcome = Outcome.FAILED if case == "ready-but-job-fails" else Outcome.PASSED
        # A failure names its obligation (one without is a harness error, an "error").
        obligation = "kubelet.job-succeeds" if outcome == Outcome.FAILED else ""
        results.append(CheckResult(nodeid, outcome, capabilities=("healthStream",), obligation=obligation))
    return results


def test_the_four_layer_line_says_how_many_ran_and_passed_and_which_layer_broke_in_each(tmp_path: Path) -> None:
    summary = summarize(_four_layer_records(tmp_path), FACTS, tmp_path)
    line = next((line for line in terminal_lines(summary) if "four-layer" in line), None)
    assert line == (
        "  four-layer cross-check: 4 ran, 3 passed; all-four-green: no layer broke (passed); "
        "allocated-but-prepare-failed: driver status broke (passed); status-ready-but-container-lacks-device: "
        "readiness broke (passed); ready-but-job-fails: job outcome broke (failed)"
    ), terminal_lines(summary)
    markdown = render_markdown(summary)
    assert "## Four-layer cross-check: 4 ran, 3 passed" in markdown, markdown
    assert "| allocated-but-prepare-failed | passed | driver status broke | ok | failed | ok | ok |" in markdown, (
        markdown
    )


def test_a_run_without_the_four_layer_check_prints_no_four_layer_line(tmp_path: Path) -> None:
    summary = summarize([CheckResult("suites/protocol/test_p.py::t", Outcome.PASSED)], FACTS, tmp_path)
    assert summary["four_layers"] == {"state": "not run"}, summary["four_layers"]
    assert not [line for line in terminal_lines(summary) if "four-layer cross-check:" in line], terminal_lines(summary)


def test_summary_md_has_tables_and_phrases_not_python_reprs(tmp_path: Path) -> None:
    results = [
        CheckResult("suites/status/test_s.py::t1", Outcome.PASSED, capabilities=("healthStream",)),
        CheckResult("suites/status/test_s.py::t2", Outcome.NOT_APPLICABLE, "not applicable: no fault switch"),
        CheckResult("suites/kubelet/test_k.py::t", Outcome.PASSED),
    ]
    markdown = render_markdown(summarize(results, FACTS, tmp_path))
    reprs = [line for line in markdown.splitlines() if re.search(r"\{'|\{\}|': ", line)]
    assert not reprs, "Python reprs in summary.md:\n" + "\n".join(reprs)
    assert "| healthStream | passed | 1 passed |" in markdown, markdown
    assert "| status | 1 not applicable, 1 passed |" in markdown, markdown
    assert "- 1 not applicable: no fault switch\n" in markdown, markdown
    assert "- flake record: one run (pass rates per test come from `dra-conformance run --repeat N`)" in markdown


def test_each_canary_caveat_is_printed_once(tmp_path: Path) -> None:
    gate = evaluate(Inputs("system:serviceaccount:d:d"), Policy())
    whys = [rule["why"] for rule in gate["rules"] if rule["why"]]
    repeated = {why for why in whys if whys.count(why) > 1}
    assert repeated, f"the case needs a caveat several rules share: {whys}"
    summary = summarize([CheckResult("suites/protocol/test_p.py::t", Outcome.PASSED)], FACTS, tmp_path, gate)
    printed, markdown = "\n".join(terminal_lines(summary)), render_markdown(summary)
    for why in set(whys):
        assert printed.count(why) == 1, f"{printed.count(why)} times in the terminal: {why}\n{printed}"
        assert markdown.count(why) == 1, f"{markdown.count(why)} times in summary.md: {why}\n{markdown}"
    for number in range(1, len(set(whys)) + 1):
        assert f"[{number}]" in printed, f"caveat [{number}] is never cited:\n{printed}"


def test_the_block_ends_with_the_runs_directory_and_what_to_run_next(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261205-120000-abcd"
    passed = summarize([CheckResult("suites/protocol/test_p.py::t", Outcome.PASSED)], FACTS, run_dir)
    failed = summarize([CheckResult("suites/protocol/test_p.py::t", Outcome.FAILED)], FACTS, run_dir)
    assert terminal_lines(passed)[-3:] == [
        f"  run: {run_dir} (summary.md, summary.json, junit.xml)",
        f"  next: the HTML report: dra-conformance report {run_dir} --serve",
        "  next: certify strictly (defensive findings fail): dra-conformance run --profile p.yaml --dra-strictness "
        "strict",
    ], terminal_lines(passed)
    assert "  next: only the failed checks again: dra-conformance run --profile p.yaml --lf" in terminal_lines(
        failed
    ), terminal_lines(failed)
    assert not any("--lf" in line for line in terminal_lines(passed)), terminal_lines(passed)


SUITE = """
import pytest

def test_passes():
    pass

def test_not_applicable():
    pytest.skip("not applicable: no real node here")
"""


def test_the_verdict_block_comes_after_pytests_skip_summary(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("suites")
    (pytester.path / "suites" / "demo").mkdir()
    (pytester.path / "suites" / "demo" / "test_demo.py").write_text(SUITE)
    reports = pytester.path / "out"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dra-reports-dir={reports}", "-ra", "suites")
    lines = [line for line in result.outlines if line.strip()]
    skipped = next((i for i, line in enumerate(lines) if line.startswith("SKIPPED [1]")), None)
    verdict = next((i for i, line in enumerate(lines) if line.startswith("verdict: ")), None)
    assert skipped is not None and verdict is not None and skipped < verdict, "\n".join(lines)
    assert re.fullmatch(r"=+ 1 passed, 1 skipped in .* =+", lines[-1]), f"pytest's outcome line is last:\n{lines}"
    run_line = next(line for line in lines[verdict:] if line.startswith("  run: "))
    run_dir = Path(run_line.removeprefix("  run: ").split(" (")[0])
    assert (run_dir / "summary.md").is_file(), f"{run_line}: {sorted(reports.rglob('*'))}"
    assert json.loads((run_dir / "summary.json").read_text())["run_dir"] == str(run_dir)
    assert lines[-2].startswith("  next: "), "\n".join(lines[verdict:])

"""The Allure HTML step's pure logic: Node.js checks, command lines, run-id resolution, the tool cache, tables."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dra_conformance.cli import EXIT_USAGE, build_parser, main
from dra_conformance.errors import UsageError
from dra_conformance.report import allure_config, allure_html, allure_tables
from dra_conformance.report.allure_html import NodeTools, RenderError, RunRenderer


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v20.20.2\n", (20, 20)), ("v22.1.0", (22, 1)), ("20.19.0", (20, 19)), ("v21.0.0-nightly", (21, 0)), ("", None)],
)
def test_node_versions_parse(text: str, expected: tuple[int, int] | None) -> None:
    assert allure_html.parse_node_version(text) == expected


@pytest.mark.parametrize(
    ("node", "npm", "version", "expected"),
    [
        ("/usr/bin/node", "/usr/bin/npm", "v20.20.2\n", None),
        (None, "/usr/bin/npm", None, "node not found on PATH"),
        (None, None, None, "node and npm not found on PATH"),
        ("/usr/bin/node", None, "v22.0.0", "npm not found on PATH"),
        ("/usr/bin/node", "/usr/bin/npm", "v18.19.1", "Node.js 18.19 is older than 20.19"),
        ("/usr/bin/node", "/usr/bin/npm", "v20.18.0", "Node.js 20.18 is older than 20.19"),
        ("/usr/bin/node", "/usr/bin/npm", "garbage", "not a Node.js version"),
    ],
    ids=["fine", "no-node", "neither", "no-npm", "node-18", "node-20.18", "garbage"],
)
def test_node_problem_names_what_is_missing(
    node: str | None, npm: str | None, version: str | None, expected: str | None
) -> None:
    problem = allure_html.node_problem(node, npm, version)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


def test_commands_are_pinned_and_need_no_shell(tmp_path: Path) -> None:
    assert allure_html.npm_ci_command("/usr/bin/npm") == [
        "/usr/bin/npm",
        "ci",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]
    cli = allure_html.allure_cli(allure_html.tool_dir(tmp_path))
    assert cli == tmp_path / "npm" / "allure-3.18.0" / "node_modules" / "allure" / "cli.js"
    script = tmp_path / "render.mjs"
    command = allure_html.render_command("/usr/bin/node", script, tmp_path / "rc.mjs", tmp_path / "r")
    assert command == [
        "/usr/bin/node",
        "--import",
        str(allure_html.NPM_PROJECT / "iterator-toarray.mjs"),
        str(script),
        str(tmp_path / "rc.mjs"),
        str(tmp_path / "r"),
    ]
    assert (allure_html.NPM_PROJECT / allure_html.RENDER_SCRIPT).is_file()
    assert (allure_html.NPM_PROJECT / "iterator-toarray.mjs").is_file()


def test_the_shipped_npm_project_pins_allure() -> None:
    package = json.loads((allure_html.NPM_PROJECT / "package.json").read_text())
    lock = json.loads((allure_html.NPM_PROJECT / "package-lock.json").read_text())
    assert package["dependencies"] == {"allure": allure_html.ALLURE_VERSION}, package
    assert lock["packages"]["node_modules/allure"]["version"] == allure_html.ALLURE_VERSION
    unpinned = [name for name, entry in lock["packages"].items() if name and not entry.get("integrity")]
    assert not unpinned, f"lock entries without an integrity hash: {unpinned}"


def _run_dir(reports: Path, run_id: str) -> Path:
    (reports / run_id / allure_html.RESULTS_DIR).mkdir(parents=True)
    return reports / run_id


def test_a_run_is_found_by_id_directory_or_results_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = tmp_path / "reports"
    run = _run_dir(reports, "20260101-000000-abcd")
    monkeypatch.chdir(tmp_path)
    assert allure_html.resolve_run("20260101-000000-abcd", reports) == run
    assert allure_html.resolve_run(str(run), tmp_path / "elsewhere") == run
    assert allure_html.resolve_run(str(run / allure_html.RESULTS_DIR), tmp_path / "elsewhere") == run
    assert allure_html.resolve_run("reports/20260101-000000-abcd", tmp_path / "elsewhere") == Path(
        "reports/20260101-000000-abcd"
    )


def test_an_unknown_run_or_one_without_results_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "reports" / "no-results").mkdir(parents=True)
    with pytest.raises(UsageError, match="no run 'nope': neither a directory nor a run id under"):
        allure_html.resolve_run("nope", tmp_path / "reports")
    with pytest.raises(UsageError, match="holds no allure-results/"):
        allure_html.resolve_run("no-results", tmp_path / "reports")


def test_report_subcommand_parses_serve_and_port() -> None:
    args = build_parser().parse_args(["report", "20260101-000000-abcd", "--serve", "--port", "8123"])
    assert (args.command, args.run, args.serve, args.port) == ("report", "20260101-000000-abcd", True, 8123)
    assert build_parser().parse_args(["report", "x"]).serve is False


def test_report_of_an_unknown_run_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "nope", "--reports-dir", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run 'nope'" in err[0] and "Traceback" not in err[0], err


FAKE_NPM = """#!/bin/sh
# Stands in for `npm ci`: counts its calls and lays out the one file the tool needs.
echo called >> "{calls}"
{fail}
mkdir -p node_modules/allure && echo '// cli' > node_modules/allure/cli.js
"""


def _fake_npm(tmp_path: Path, fail: bool = False) -> tuple[NodeTools, Path]:
    calls = tmp_path / "npm-calls"
    npm = tmp_path / "npm"
    npm.write_text(FAKE_NPM.format(calls=calls, fail="echo 'npm ERR! 404 allure' >&2; exit 1" if fail else ""))
    npm.chmod(0o755)
    return NodeTools(node="/usr/bin/node", npm=str(npm)), calls


def test_the_tool_is_installed_once_per_lock_and_again_when_the_lock_changes(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in allure_html.NPM_FILES:
        (project / name).write_text((allure_html.NPM_PROJECT / name).read_text())
    tools, calls = _fake_npm(tmp_path)
    cache = tmp_path / "cache"
    first = allure_html.install(tools, cache, project)
    assert first == allure_html.tool_dir(cache) and allure_html.allure_cli(first).is_file()
    assert allure_html.install(tools, cache, project) == first
    assert calls.read_text().count("called") == 1, "a second install with the same lock must reuse the cache"
    (project / "package-lock.json").write_text((project / "package-lock.json").read_text() + "\n")
    allure_html.install(tools, cache, project)
    assert calls.read_text().count("called") == 2, "a changed lock must reinstall"
    leftovers = [p.name for p in first.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"staging directories left in the cache: {leftovers}"


def test_a_failed_npm_ci_is_one_line_and_leaves_no_half_install(tmp_path: Path) -> None:
    tools, _ = _fake_npm(tmp_path, fail=True)
    cache = tmp_path / "cache"
    with pytest.raises(RenderError, match=r"npm ci exited 1: npm ERR! 404 allure"):
        allure_html.install(tools, cache)
    assert not allure_html.tool_dir(cache).exists()
    assert [p.name for p in (cache / "npm").iterdir() if not p.name.endswith(".lock")] == []


class _Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str, **_: Any) -> None:
        self.lines.append(text)


def _config(results: Path | None, worker: bool = False) -> Any:
    config = SimpleNamespace(option=SimpleNamespace(collectonly=False, allure_report_dir=results and str(results)))
    if worker:
        config.workerinput = {}
    return config


def test_without_node_the_run_says_in_one_line_why_no_html(tmp_path: Path) -> None:
    renderer = RunRenderer(tmp_path)
    renderer.tools, renderer.problem = None, "node and npm not found on PATH"
    terminal = _Terminal()
    run = _run_dir(tmp_path / "reports", "r1")
    renderer.pytest_terminal_summary(terminal, _config(run / allure_html.RESULTS_DIR))
    assert terminal.lines == ["allure HTML: not rendered: node and npm not found on PATH"]
    assert renderer.render_now(print) is None
    assert not (run / allure_html.REPORT_DIR).exists()


def test_with_node_the_run_names_the_html_and_how_to_serve_it(tmp_path: Path) -> None:
    renderer = RunRenderer(tmp_path)
    renderer.tools = NodeTools(node="/usr/bin/node", npm="/usr/bin/npm")
    terminal = _Terminal()
    run = _run_dir(tmp_path / "reports", "r2")
    renderer.pytest_terminal_summary(terminal, _config(run / allure_html.RESULTS_DIR))
    assert terminal.lines == [
        f"allure HTML: rendered after the run into {run / allure_html.REPORT_DIR} "
        "(view it: dra-conformance report r2 --serve)"
    ]
    renderer.pytest_terminal_summary(terminal, _config(run / allure_html.RESULTS_DIR, worker=True))
    renderer.pytest_terminal_summary(terminal, _config(None))
    assert len(terminal.lines) == 1, f"workers and runs without Allure say nothing: {terminal.lines}"


def test_a_render_failure_never_fails_the_run(tmp_path: Path) -> None:
    tools, _ = _fake_npm(tmp_path, fail=True)
    renderer = RunRenderer(tmp_path / "cache")
    renderer.tools = tools
    renderer.run_dir = _run_dir(tmp_path / "reports", "r3")
    said: list[str] = []
    assert renderer.render_now(said.append) is None
    assert len(said) == 1 and said[0].startswith("allure HTML: not rendered: install allure 3.18.0: npm ci"), said


def test_a_list_of_records_is_one_row_each_with_every_key_a_column() -> None:
    table = allure_tables.markdown_table(
        [
            {"cell": "a/b/v1", "outcome": "deny", "message": 'forbidden: "x" | y\nmore'},
            {"cell": "a/c/v1", "outcome": "allow", "extra": {"k": 1}},
        ]
    )
    assert table.splitlines() == [
        "| cell | outcome | message | extra.k |",
        "|---|---|---|---|",
        '| a/b/v1 | deny | forbidden: "x" \\| y more |  |',
        "| a/c/v1 | allow |  | 1 |",
    ]


def test_a_document_is_one_row_per_dotted_key() -> None:
    table = allure_tables.markdown_table(
        {"decisions": ["keep serving v1beta1", "hold"], "evidence": {"available": {"v1": "True/Passed"}, "p95": None}}
    )
    assert table.splitlines() == [
        "| key | value |",
        "|---|---|",
        "| decisions | keep serving v1beta1, hold |",
        "| evidence.available.v1 | True/Passed |",
        "| evidence.p95 |  |",
    ]


def test_figures_per_name_are_one_row_per_name() -> None:
    table = allure_tables.markdown_table(
        {"NodePrepareResources": {"count": 3, "p95": 0.012}, "NodeUnprepareResources": {"count": 2, "p95": 0.004}}
    )
    assert table.splitlines() == [
        "|  | count | p95 |",
        "|---|---|---|",
        "| NodePrepareResources | 3 | 0.012 |",
        "| NodeUnprepareResources | 2 | 0.004 |",
    ]


def test_a_long_cell_is_cut() -> None:
    row = allure_tables.markdown_table([{"message": "x" * (allure_tables.MAX_CELL + 50)}]).splitlines()[2]
    assert len(row) == len("|  |") + allure_tables.MAX_CELL and row.endswith("… |"), row[-20:]


def test_tables_are_global_attachments_allure_reads(tmp_path: Path) -> None:
    path = allure_tables.write_global_tables(tmp_path, [("authorization matrix", [{"cell": "a", "outcome": "allow"}])])
    assert path is not None and path.name.endswith("-globals.json")
    document = json.loads(path.read_text())
    [attachment] = document["attachments"]
    assert (attachment["name"], attachment["type"]) == ("authorization matrix", "text/markdown")
    assert attachment["source"].endswith("-attachment.md")
    text = (tmp_path / attachment["source"]).read_text()
    assert text.startswith("# authorization matrix\n\n| cell | outcome |"), text
    assert allure_tables.write_global_tables(tmp_path / "none", []) is None
    assert not (tmp_path / "none").exists()


def test_the_report_is_titled_with_the_verdict_and_the_canary_gate_where_the_run_wrote_them(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261201-000000-abcd"
    run_dir.mkdir()
    assert allure_html.report_name(run_dir) == "dra-conformance 20261201-000000-abcd"
    (run_dir / "summary.json").write_text(
        json.dumps(
            {
                "verdict": "certified with advisories",
                "run": {"driver": "gpu.example.com"},
                "canary_gate": {"state": "pass"},
            }
        )
    )
    assert allure_html.report_name(run_dir) == (
        "gpu.example.com: certified with advisories (canary gate: pass) - dra-conformance 20261201-000000-abcd"
    )


def test_the_quality_gate_shows_the_verdict_and_every_canary_rule_as_decided() -> None:
    summary = {
        "verdict": "certified with advisories",
        "reasons": ["advisory status.ready-condition-true (1 finding)"],
        "canary_gate": {
            "rules": [
                {"rule": "allocation p95", "figure": "DRA p95 0.03 s", "threshold": "<= 0.26 s", "result": "pass"},
                {"rule": "errors against budget", "figure": "2", "threshold": "<= 0", "result": "hold", "why": ""},
            ]
        },
    }
    rules = allure_config.gate_rules(summary)
    assert [(r["rule"], r["success"]) for r in rules] == [
        ("certification verdict", True),
        ("canary gate: allocation p95", True),
        ("canary gate: errors against budget", False),
    ]
    assert rules[0]["message"] == "certified with advisories: advisory status.ready-condition-true (1 finding)"
    config = allure_config.allurerc("gpu: certified", "/out", summary)
    assert '"certification verdict"' in config and "qualityGate" in config and '"/out"' in config
    assert "qualityGate" in allure_config.allurerc("x", "/out", None), "spread is conditional in the JS itself"

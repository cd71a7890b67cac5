"""`dra-conformance explore`: the explorer's suite alone, its budget and seed as the plugin's options (no cluster)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dra_conformance import cli, paths


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[argparse.Namespace, list[str]]]:
    """What `explore` hands to `run`, which is not run; the reports land in tmp_path."""
    seen: list[tuple[argparse.Namespace, list[str]]] = []

    def run(args: argparse.Namespace, pytest_args: list[str]) -> int:
        seen.append((args, pytest_args))
        reports = Path(next(a for a in pytest_args if a.startswith("--dra-reports-dir=")).split("=", 1)[1])
        records = reports / "run-1" / "records" / "explore"
        records.mkdir(parents=True)
        (records / "main.jsonl").write_text(json.dumps({"lines": ["explored with seed 7: ...", "reproduce: x"]}) + "\n")
        return 1

    monkeypatch.setattr(cli, "_run", run)
    monkeypatch.setattr(cli, "_reports_root", lambda: tmp_path)
    return seen


def test_explore_runs_its_suite_in_process_with_the_budget_and_prints_the_exploration(
    runs: list[tuple[argparse.Namespace, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["explore", "--profile", "p.yaml", "--seed", "7", "--max-steps", "5", "--dra-keep-cluster"])
    assert code == 1
    (args, pytest_args), *_ = runs
    assert (args.workers, args.no_html, args.profile) == (0, True, Path("p.yaml"))
    assert pytest_args[-1] == str(paths.suites_dir() / "explore")
    assert "--dra-explore-seed=7" in pytest_args and "--dra-explore-max-steps=5" in pytest_args
    assert "--dra-explore-seconds=180" in pytest_args and "--dra-keep-cluster" in pytest_args
    assert "timeout=600" in pytest_args  # 180 s exploring, 120 s shrinking, and the slack
    assert capsys.readouterr().out.splitlines() == ["explored with seed 7: ...", "reproduce: x"]


def test_replay_runs_the_seed_with_no_time_budget(runs: list[tuple[argparse.Namespace, list[str]]]) -> None:
    cli.main(["explore", "--replay", "7", "--max-examples", "40"])
    _, pytest_args = runs[0]
    assert {"--dra-explore-seed=7", "--dra-explore-seconds=0", "--dra-explore-max-examples=40"} <= set(pytest_args)
    assert "timeout=0" in pytest_args


def test_seed_and_replay_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["explore", "--seed", "1", "--replay", "2"])
    assert exited.value.code == cli.EXIT_USAGE
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_flag_neither_explore_nor_pytest_knows_is_one_line_naming_explore() -> None:
    pytest_text = "usage: pytest [options]\npytest: error: unrecognized arguments: --bogus\n  inifile: None\n"
    line = cli.one_line_usage_error(pytest_text, "explore")
    assert line == (
        "dra-conformance explore: unrecognized arguments: --bogus (its own flags: dra-conformance explore --help; "
        "the rest goes to pytest)"
    ), line
    assert cli.one_line_usage_error(pytest_text).startswith("dra-conformance run: unrecognized arguments: --bogus")


def test_explore_runs_pytest_under_its_own_name_for_usage_errors(
    runs: list[tuple[argparse.Namespace, list[str]]],
) -> None:
    cli.main(["explore", "--seed", "1"])
    args, _ = runs[0]
    assert args.usage_command == "explore"

"""Bad input to the CLI gets one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dra_conformance import settings, versions
from dra_conformance.backends.registry import BACKENDS, real_node_blocker
from dra_conformance.cli import (
    EXIT_FAILED,
    EXIT_USAGE,
    PLUGIN_PATH_OPTIONS,
    build_parser,
    chosen_targets,
    cluster_config,
    main,
    one_line_usage_error,
    real_node_wanted,
    shared_plugin_options,
)
from dra_conformance.errors import UsageError
from dra_conformance.plugin import metrics_fixtures, options, rbac_fixtures, rollback_fixtures, scenario_fixtures
from dra_conformance.timeouts import Timeouts

# pytest refuses an unknown option while it parses the command line, before any cluster: seconds at most.
UNKNOWN_OPTION_DEADLINE = 60.0


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {text!r}"
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["cluster", "sideways"], "invalid choice: 'sideways'"),
        (["cluster", "up", "--nodes", "0"], "expected at least 1, got 0"),
        (["cluster", "up", "--nodes", "two"], "expected a whole number, got 'two'"),
        (["cluster", "status", "--bogus"], "unrecognized arguments: --bogus"),
        (["fly"], "invalid choice: 'fly'"),
        (["cluster", "up", "--dra-timeout-apiserver-ready", "0"], "expected more than 0 seconds, got 0"),
        (["cluster", "up", "--dra-timeout-etcd-ready=soon"], "expected seconds, got 'soon'"),
        (["cluster", "up", "--dra-timeout-pod-scheduled=5"], "unrecognized arguments: --dra-timeout-pod-scheduled=5"),
        (["run", "-n", "-1"], "expected 0 or more, got -1"),
    ],
    ids=[
        "unknown-action",
        "zero-nodes",
        "non-numeric-nodes",
        "unknown-flag",
        "unknown-command",
        "zero-deadline",
        "non-numeric-deadline",
        "deadline-not-of-cluster-start",
        "negative-workers",
    ],
)
def test_bad_flags_exit_with_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    assert expected in _one_line(capsys.readouterr().err)


def test_cluster_up_takes_its_start_up_deadlines_with_the_plugins_spelling() -> None:
    args = build_parser().parse_args(
        ["cluster", "up", "--dra-timeout-apiserver-ready=240", "--dra-timeout-driver-ready", "120"]
    )
    timeouts = cluster_config(args).timeouts
    assert (timeouts.apiserver_ready, timeouts.driver_ready) == (240.0, 120.0), timeouts
    assert timeouts.etcd_ready == Timeouts().etcd_ready, "a deadline not given keeps its default"


def test_status_of_a_cluster_that_is_not_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "status", "--state-dir", str(tmp_path / "none")]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == "local cluster is not running"


def test_run_against_existing_cluster_needs_a_kubeconfig(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["run", "--cluster", "existing"]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err) == "dra-conformance: --cluster=existing needs --kubeconfig"


def test_run_with_a_missing_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["run", "--cluster", "existing", "--kubeconfig", str(missing)]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err) == f"dra-conformance: kubeconfig {missing}: no such file"


def test_run_with_a_malformed_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [this is: not, a kubeconfig\n")
    assert main(["run", "--cluster", "existing", "--kubeconfig", str(broken)]) == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"dra-conformance: kubeconfig {broken}: "), line


def test_run_targets_leave_out_the_values_of_options_given_as_separate_arguments() -> None:
    """An option's value that happens to be a directory is not a test path (it would run every test under it)."""
    assert chosen_targets(["--dra-state-dir", "suites", "-rs"]) == []
    assert chosen_targets(["--dra-keep-cluster", "suites", "-k", "tests"]) == ["suites"]
    assert chosen_targets(["-rs", "suites/kubelet::test_x"]) == ["suites/kubelet::test_x"]


class _OptionRecorder:
    """Stands in for pytest's parser and its groups, noting the options whose value is a path."""

    def __init__(self) -> None:
        self.path_options: set[str] = set()

    def getgroup(self, *_: object) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **settings: object) -> None:
        if settings.get("type") is Path:
            self.path_options.update(names)


def test_the_cli_knows_every_path_option_of_the_plugin() -> None:
    recorder = _OptionRecorder()
    for module in (options, metrics_fixtures, rbac_fixtures, scenario_fixtures, rollback_fixtures):
        module.pytest_addoption(recorder)
    assert recorder.path_options == PLUGIN_PATH_OPTIONS


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--cluster-state-dir=/tmp/x", "-k", "rbac"], "--cluster-state-dir is now --state-dir"),
        (["run", "--dra-cluster-state-dir", "/tmp/x"], "--dra-cluster-state-dir is now --dra-state-dir"),
        (["run", "--dra-metrics-implementation=none"], "--dra-metrics-implementation is now --dra-metrics"),
        (["run", "--rollback-phase", "before"], "--rollback-phase is now --dra-rollback-phase"),
        (["explore", "--keep-cluster"], "--keep-cluster is now --dra-keep-cluster"),
    ],
    ids=["renamed-run-flag", "renamed-plugin-option", "renamed-metrics", "prefixless", "explore"],
)
def test_a_former_spelling_gets_one_line_naming_the_one_to_use(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    assert code == EXIT_USAGE, code
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"dra-conformance: {expected} "), line


def test_every_former_spelling_names_an_option_of_the_plugin(pytester: pytest.Pytester) -> None:
    parser = pytester.parseconfig()._parser
    names = {name for group in parser._groups for option in group.options for name in option.names()}
    targets = {settings.PLUGIN_PREFIX + settings.RENAMED.get(name, name) for name in settings.PREFIXLESS}
    targets |= {settings.PLUGIN_PREFIX + new for new in settings.RENAMED.values()}
    missing = sorted(target for target in targets if target not in names)
    assert not missing, f"former spellings that point at no option of the plugin: {missing}"


def test_a_former_spelling_in_plain_pytest_is_one_usage_error(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.UsageError, match=r"^--dra-cluster-state-dir is now --dra-state-dir$"):
        pytester.parseconfig("--dra-cluster-state-dir=/tmp/x")


def test_run_and_cluster_take_the_shared_settings_with_one_spelling(tmp_path: Path) -> None:
    cluster = build_parser().parse_args(["cluster", "up", "--state-dir", str(tmp_path), "--cache-dir", "c"])
    run, rest = build_parser().parse_known_args(["run", "--state-dir", str(tmp_path), "--cache-dir", "c", "-x"])
    assert (cluster.state_dir, cluster.cache_dir) == (run.state_dir, run.cache_dir) == (tmp_path, Path("c")), (
        cluster,
        run,
    )
    assert rest == ["-x"], rest
    passed = shared_plugin_options(run)
    assert f"--dra-state-dir={tmp_path}" in passed and "--dra-cache-dir=c" in passed, passed


def test_every_command_takes_the_shared_settings_the_table_says() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    sonobuoy = next(a for a in commands["sonobuoy"]._actions if isinstance(a, argparse._SubParsersAction))
    flags = {name: set(sub._option_string_actions) for name, sub in commands.items()}
    flags["sonobuoy"] = set(sonobuoy.choices["run"]._option_string_actions)
    wrong = [
        (setting.flag, command)
        for setting in settings.SHARED
        for command in setting.commands
        if setting.flag not in flags[command]
    ]
    assert not wrong, f"shared settings a command does not take: {wrong}"
    assert settings.BACKEND_NAMES == tuple(BACKENDS), (settings.BACKEND_NAMES, tuple(BACKENDS))


def test_run_against_an_existing_cluster_reads_kubeconfig_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "from-env.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", f"{missing}:{tmp_path / 'second'}")
    assert main(["run", "--cluster", "existing"]) == EXIT_USAGE
    assert _one_line(capsys.readouterr().err) == f"dra-conformance: kubeconfig {missing}: no such file"


def test_version_names_the_release_the_pinned_kubernetes_and_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    line = _one_line(capsys.readouterr().out)
    assert exited.value.code == 0, exited.value.code
    kubernetes = re.escape(versions.KUBERNETES)
    assert re.fullmatch(rf"dra-conformance \S+ \(Kubernetes {kubernetes}, commit \S.*\)", line), line
    assert "unknown" not in line, f"a checkout knows its commit: {line}"


def test_run_help_lists_the_suite_options_in_their_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = capsys.readouterr().out
    titles = [line for line in shown.splitlines() if line.startswith("DRA conformance")]
    assert len(titles) >= 5 and titles[0].startswith("DRA conformance: cluster"), titles
    for option in ("--dra-state-dir", "--dra-rollback-phase", "--dra-strictness", "--dra-timeout-pod-scheduled"):
        assert option in shown, f"{option} not in run --help:\n{shown}"


def test_real_node_auto_follows_what_the_machine_allows_and_says_why_not() -> None:
    blocker = real_node_blocker()
    assert real_node_wanted("auto") == (not blocker, blocker)
    assert real_node_wanted(None) == (False, "not asked for (--real-node)")
    assert real_node_wanted("yes") == (True, "")


def test_real_node_on_another_backend_is_refused_when_asked_and_silent_on_auto() -> None:
    with pytest.raises(UsageError, match="--real-node adds a node to the local cluster; backend existing"):
        real_node_wanted("yes", "existing")
    assert real_node_wanted("auto", "existing") == (False, "")


def test_real_node_flags_leave_the_suite_paths_to_pytest() -> None:
    args, rest = build_parser().parse_known_args(["run", "--real-node", "suites/kubelet"])
    assert (args.real_node, args.real_node_auto, rest) == (True, False, ["suites/kubelet"])
    args, rest = build_parser().parse_known_args(["run", "--real-node-auto", "suites/kubelet"])
    assert (args.real_node, args.real_node_auto, rest) == (False, True, ["suites/kubelet"])


def test_a_bad_pytest_option_is_one_line_naming_it() -> None:
    pytest_text = (
        "usage: dra-conformance [options] [file_or_dir] [file_or_dir] [...]\n"
        "dra-conformance: error: unrecognized arguments: --bogus\n"
        "  inifile: /tmp/x/pyproject.toml\n"
        "  rootdir: /tmp/x\n"
    )
    line = one_line_usage_error(pytest_text)
    assert "\n" not in line and line.startswith("dra-conformance run: unrecognized arguments: --bogus"), line
    assert one_line_usage_error("file or directory not found: nope\n") == "file or directory not found: nope"


def test_run_with_an_unknown_option_says_so_in_one_line_and_exits_4(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dra_conformance.cli", "run", "--no-such-option"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=UNKNOWN_OPTION_DEADLINE,
        check=False,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 4, f"exit {result.returncode}; stderr: {result.stderr!r}"
    assert len(lines) == 1 and "unrecognized arguments: --no-such-option" in lines[0], f"stderr: {result.stderr!r}"
    assert not (tmp_path / "reports").exists(), f"left behind: {sorted(tmp_path.rglob('*'))}"


def test_the_plugin_reads_kubeconfig_from_the_environment_for_an_existing_cluster(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "env.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(pytest.UsageError, match=f"kubeconfig {re.escape(str(missing))}: no such file"):
        options.suite_config_from(pytester.parseconfig("--dra-cluster=existing"))
    local = options.suite_config_from(pytester.parseconfig("--dra-cluster=local"))
    assert local.kubeconfig is None, f"a local cluster writes its own kubeconfig, got {local.kubeconfig}"

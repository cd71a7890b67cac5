"""The plugin acts only in a run that asks for DRA conformance (dra_conformance/plugin/opt_in.py).

The subprocess runs load the plugin the way an installed wheel does, through its `pytest11` entry point; each
vendor test asserts that it is loaded, so a run where it is not could not pass for one it left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import cli, paths
from dra_conformance.plugin.opt_in import ROOT_FIXTURE, asked_before_collection
from dra_conformance.plugin.options import GROUP, OPTION_PREFIX, options_given

# The project's own conftest: what SIGTERM did before pytest configured its plugins.
VENDOR_CONFTEST = """
import signal

SIGTERM_BEFORE = signal.getsignal(signal.SIGTERM)
"""

UNRELATED_TEST = """
import signal

from conftest import SIGTERM_BEFORE


def test_unrelated(request):
    assert request.config.pluginmanager.has_plugin("dra_conformance"), "the plugin's entry point did not load"
    assert signal.getsignal(signal.SIGTERM) is SIGTERM_BEFORE, signal.getsignal(signal.SIGTERM)
"""

# Uses one of the plugin's fixtures (no cluster needed) and writes into the run directory.
FIXTURE_TEST = """
import signal

from conftest import SIGTERM_BEFORE


def test_uses_a_fixture(request, run_dir):
    assert request.config.pluginmanager.has_plugin("dra_conformance"), "the plugin's entry point did not load"
    if not hasattr(request.config, "workerinput"):  # the controller handles SIGTERM, not the workers
        assert signal.getsignal(signal.SIGTERM) is not SIGTERM_BEFORE, "opted in, but SIGTERM is not handled"
    run_dir.mkdir(parents=True)
    (run_dir / "note.txt").write_text("written by a vendor test")
"""

XDIST = [pytest.param([], id="no-xdist"), pytest.param(["-n", "2"], id="xdist")]


def _vendor_project(pytester: pytest.Pytester, test: str) -> None:
    pytester.makeconftest(VENDOR_CONFTEST)
    pytester.makepyfile(test_vendor=test)


def _ours(output: str) -> list[str]:
    """Lines the plugin prints: its header, its report sections, its masking note (not pytest's list of plugins)."""
    markers = ("dra-conformance", "reports: ", "certification summary", "masked")
    lines = [line for line in output.splitlines() if not line.startswith("plugins: ")]
    return [line for line in lines if any(marker in line for marker in markers)]


@pytest.mark.parametrize("workers", XDIST)
def test_a_run_that_does_not_ask_is_left_alone(pytester: pytest.Pytester, workers: list[str]) -> None:
    _vendor_project(pytester, UNRELATED_TEST)
    junit = pytester.path / "my.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={junit}", *workers)
    result.assert_outcomes(passed=1)
    assert junit.is_file(), f"--junitxml={junit} not written: {sorted(p.name for p in pytester.path.iterdir())}"
    assert 'tests="1"' in junit.read_text(), junit.read_text()[:500]
    assert not (pytester.path / "reports").exists(), list((pytester.path / "reports").rglob("*"))
    assert not list(pytester.path.rglob("allure-results")), list(pytester.path.rglob("allure-results"))
    output = result.stdout.str() + result.stderr.str()
    assert _ours(output) == [], output


@pytest.mark.parametrize("workers", XDIST)
def test_a_test_using_a_fixture_of_the_plugin_opts_the_run_in(pytester: pytest.Pytester, workers: list[str]) -> None:
    """The run opts in at collection: SIGTERM is handled, and the controller masks and reports the run directory."""
    _vendor_project(pytester, FIXTURE_TEST)
    junit = pytester.path / "my.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={junit}", *workers)
    result.assert_outcomes(passed=1)
    runs = list((pytester.path / "reports").iterdir())
    assert [sorted(p.name for p in run.iterdir()) for run in runs] == [["note.txt"]], runs
    assert junit.is_file(), "an opt-in at collection leaves --junitxml where the command line put it"
    output = result.stdout.str()
    assert any(line.startswith("reports: IPs, MACs") for line in output.splitlines()), output


@pytest.mark.parametrize(
    ("args", "addopts"),
    [
        pytest.param(["--dra-conformance"], None, id="dra-conformance"),
        pytest.param(["--dra-strictness=strict"], None, id="any-dra-option"),
        pytest.param([], "--dra-no-mask", id="dra-option-in-addopts"),
    ],
)
def test_a_dra_option_opts_the_run_in_before_collection(
    pytester: pytest.Pytester, args: list[str], addopts: str | None
) -> None:
    """JUnit and Allure results go to reports/<run-id>/, the header names the run, SIGTERM is handled."""
    _vendor_project(pytester, UNRELATED_TEST.replace(" is SIGTERM_BEFORE", " is not SIGTERM_BEFORE"))
    if addopts is not None:
        pytester.makeini(f"[pytest]\naddopts = {addopts}\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    runs = list((pytester.path / "reports").iterdir())
    assert len(runs) == 1 and (runs[0] / "junit.xml").is_file(), list((pytester.path / "reports").rglob("*"))
    assert any(line.startswith("dra-conformance: run ") for line in result.stdout.lines), result.stdout.str()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([str(paths.suites_dir() / "rbac")], id="suite-directory"),
        pytest.param([f"{paths.suites_dir() / 'rbac' / 'test_least_privilege.py'}::test_x"], id="node-id"),
        pytest.param(["--pyargs", "dra_conformance.suites.rbac"], id="pyargs"),
    ],
)
def test_naming_the_bundled_suites_opts_the_run_in_before_collection(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    config = pytester.parseconfig(*args)
    assert asked_before_collection(config), config.args


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="project-directory"),
        pytest.param(["test_vendor.py"], id="project-test"),
        pytest.param(["--pyargs", "dra_conformance_extras"], id="another-package"),
        pytest.param([str(paths.CHECKOUT / "tests" / "unit")], id="checkout-tests"),
    ],
)
def test_other_test_paths_do_not_ask(pytester: pytest.Pytester, args: list[str]) -> None:
    config = pytester.parseconfig(*args)
    assert not asked_before_collection(config), config.args


@pytest.mark.skipif(paths.installed(), reason="a checkout's own directory holds the suites")
def test_the_checkout_directory_holds_the_suites(pytester: pytest.Pytester) -> None:
    """Bare `pytest` in the checkout collects its testpaths, `suites` among them."""
    config = pytester.parseconfig(str(paths.CHECKOUT))
    assert asked_before_collection(config), config.args


def test_every_option_of_the_plugin_is_prefixed_and_given_only_by_the_user(pytester: pytest.Pytester) -> None:
    """`--dra-*`, default None (False for a flag): any value the run has, it was given, and it opts the run in."""
    config = pytester.parseconfig()
    options = config._parser.getgroup(GROUP).options
    names = [name for option in options for name in option.names()]
    assert len(options) > 20, names  # the group is the plugin's, not an empty one of the same name
    assert [name for name in names if not name.startswith(OPTION_PREFIX)] == [], names
    assert options_given(config) == []
    assert options_given(pytester.parseconfig("--dra-nodes=2", "--dra-keep-cluster")) == [
        "--dra-keep-cluster",
        "--dra-nodes",
    ]


def test_every_fixture_of_the_plugin_opts_the_run_in(pytester: pytest.Pytester) -> None:
    """Each fixture the plugin defines requests the root fixture, directly or through another."""
    recorder = pytester.inline_run("--collect-only", "-p", "no:cacheprovider")
    session = recorder.getcalls("pytest_sessionstart")[0].session
    definitions = session._fixturemanager._arg2fixturedefs
    ours = sorted(
        name
        for name, defs in definitions.items()
        if any(d.func.__module__.startswith("dra_conformance.plugin") for d in defs) and name != ROOT_FIXTURE
    )
    assert len(ours) > 30, ours  # the plugin's fixtures were found at all
    pytester.makepyfile(test_each="\n".join(f"def test_{name}({name}): pass" for name in ours))
    recorder = pytester.inline_run("--collect-only", "-p", "no:cacheprovider")
    items = [call.item for call in recorder.getcalls("pytest_itemcollected")]
    assert len(items) == len(ours), [item.name for item in items]
    missing = [item.name for item in items if ROOT_FIXTURE not in getattr(item, "fixturenames", ())]
    assert missing == [], f"fixtures that do not request {ROOT_FIXTURE}: {missing}"


def test_the_project_suites_directory_is_not_the_bundled_one(pytester: pytest.Pytester) -> None:
    suites = pytester.mkdir("suites")
    config = pytester.parseconfig(str(suites))
    assert not asked_before_collection(config), (config.args, Path(paths.suites_dir()))


def test_dra_conformance_run_maps_its_flags_to_the_plugins_and_so_opts_in(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: list[list[str]] = []

    def run_pytest(args: list[str], html: bool, command: str = "run") -> int:
        captured.append(args)
        return cli.EXIT_OK

    monkeypatch.setattr(cli, "_pytest_then_html", run_pytest)
    assert cli.main(["run", "--nodes", "3", "--real-node", "--allow-partial", "-k", "nothing"]) == cli.EXIT_OK
    (args,) = captured
    flags = [arg for arg in args if arg.startswith("--dra-")]
    assert flags == ["--dra-cluster=local", "--dra-nodes=3", "--dra-real-node", "--dra-allow-partial"], args
    assert asked_before_collection(pytester.parseconfig(*flags)), args

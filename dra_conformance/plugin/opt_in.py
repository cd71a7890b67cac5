"""Whether a pytest run asks for DRA conformance: the plugin acts only in a run that does.

The plugin is registered wherever the wheel is installed (its `pytest11` entry point), so a vendor's unrelated
tests meet it too; in a run that has not asked, it loads nothing, installs no signal handler, leaves JUnit and
Allure where they were, writes no reports and prints nothing. A run asks in any of these ways:

- before collection, from the command line (decided while pytest configures, so the whole run is the suite's:
  JUnit and Allure in reports/<run-id>/, the cluster named by `--dra-cluster` checked before the first test):
  any `--dra-*` option, `--dra-conformance` among them (`dra-conformance run` always passes `--dra-cluster`); or
  a test path at or inside the bundled suites, or the checkout directory holding them (`pytest suites/rbac`,
  bare `pytest` in the checkout, whose testpaths hold `suites`), or `--pyargs dra_conformance.suites[.<suite>]`;
- at collection: a collected test that lives in the bundled suites, or that uses one of the plugin's fixtures
  (every fixture requests `conformance_run`, directly or through another). JUnit and Allure have been configured
  by then and stay where the command line put them; everything else (the run report, the summary, stopping the
  cluster the run started) follows. Under xdist the workers collect, and the controller learns from the first
  report of an opted-in worker (`REPORT_ATTRIBUTE`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.errors import UsageError
from dra_conformance.plugin.options import options_given

# The plugin's root fixture: every other fixture of the plugin requests it, directly or through another.
ROOT_FIXTURE = "conformance_run"
SUITES_PACKAGE = "dra_conformance.suites"
# Set on each test report of an opted-in xdist worker; it travels with the report to the controller.
REPORT_ATTRIBUTE = "dra_conformance_run"


def asked_before_collection(config: pytest.Config) -> bool:
    """Whether the command line asks for DRA conformance: a `--dra-*` option, or the suites as test paths."""
    return bool(options_given(config)) or names_the_suites(config)


def names_the_suites(config: pytest.Config) -> bool:
    """Whether a test path of the run (given, or the ini file's testpaths) collects the bundled suites.

    A directory above the suites counts only in a checkout: an installed wheel's suites sit in site-packages,
    which pytest does not enter from a project directory (an unrelated `pytest` there must not opt in).
    """
    suites = _suites()
    if suites is None:
        return False
    for arg in config.args:
        target = arg.split("::", 1)[0]
        if config.option.pyargs and (target == SUITES_PACKAGE or target.startswith(SUITES_PACKAGE + ".")):
            return True
        path = (config.invocation_params.dir / target).resolve()
        if path == suites or suites in path.parents:
            return True
        if not paths.installed() and path in suites.parents:
            return True
    return False


def uses_the_plugin(item: pytest.Item) -> bool:
    """Whether a collected test lives in the bundled suites or uses one of the plugin's fixtures."""
    return ROOT_FIXTURE in getattr(item, "fixturenames", ()) or in_the_suites(item)


def in_the_suites(item: pytest.Item) -> bool:
    """Whether a collected test lives in the bundled suites (not in a project's own `suites/`)."""
    suites = _suites()
    return suites is not None and Path(item.path).resolve().is_relative_to(suites)


def _suites() -> Path | None:
    try:
        return paths.suites_dir().resolve()
    except UsageError:
        return None  # a broken install: it cannot opt in by its suites, and the run it is in is not ours to stop

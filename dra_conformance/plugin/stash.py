"""Per-process state of the plugin, kept in `config.stash` (never in module globals or the environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.config import SuiteConfig
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.kube.rights import Right
from dra_conformance.model.cluster import ClusterInfo

RUN_ID = pytest.StashKey[str]()
# The process that owns a cluster this run starts: the controller (xdist) or the only process.
OWNER_PID = pytest.StashKey[int]()
SUITE_CONFIG = pytest.StashKey[SuiteConfig]()
RUN_DIR = pytest.StashKey[Path]()
# The cluster the controller started or attached to and checked (absent until a test needs it, without --dra-cluster).
CLUSTER = pytest.StashKey[ClusterInfo]()
# The driver under test's profile, validated once per process.
PROFILE = pytest.StashKey[DriverProfile]()
# Rights the suite's identity lacks (with the suites that need each), where --dra-allow-partial let the run go on;
# the checks of those suites are skipped at collection. Set by the controller's preflight, handed to workers.
MISSING_RIGHTS = pytest.StashKey[dict[Right, tuple[str, ...]]]()


def worker_name(config: pytest.Config) -> str:
    """The xdist worker id ("gw0", ...), or "main" without xdist."""
    return str(getattr(config, "workerinput", {}).get("workerid", "main"))


def is_worker(config: pytest.Config) -> bool:
    """True in an xdist worker; the controller (or a run without xdist) owns the run-wide steps."""
    return hasattr(config, "workerinput")


def opted_in(config: pytest.Config) -> bool:
    """True once this process takes part in a DRA conformance run (see `plugin.opt_in`)."""
    return SUITE_CONFIG in config.stash

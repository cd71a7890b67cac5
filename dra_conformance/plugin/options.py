"""The plugin's command-line options, and the run's `SuiteConfig` built from them.

Every option of the plugin is named `--dra-*` and defaults to None (False for a flag): a value means the run
asked for DRA conformance (see `plugin.opt_in`). The default an option stands for is applied where it is read.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dra_conformance import settings
from dra_conformance.backends.registry import make_backend
from dra_conformance.config import SuiteConfig
from dra_conformance.errors import UsageError
from dra_conformance.timeouts import Timeouts, timeout_option

T = TypeVar("T")

# Every option of the plugin is `--dra-<name>`, in a help group named GROUP or `GROUP-<topic>`; argparse stores it
# as `dra_<name>`.
GROUP = "dra-conformance"
OPTION_PREFIX = "--dra-"
DEST_PREFIX = "dra_"
GROUP_TITLES = {
    "reports": "DRA conformance: reports",
    "verdict": "DRA conformance: verdict, canary gate and strictness",
    "rbac": "DRA conformance: authorization",
    "scenarios": "DRA conformance: scenarios",
    "metrics": "DRA conformance: Metrics API",
    "rollback": "DRA conformance: rollback rehearsals",
    "deadlines": "DRA conformance: deadlines (seconds)",
}
# How pytest reads a shared setting's value, by its kind (a count is checked where it is read).
PLUGIN_TYPES: dict[str, type] = {"path": Path, "count": int, "choice": str, "text": str}
# What naming the cluster does beyond choosing it.
CLUSTER_PREFLIGHT = {"cluster": "; naming it checks the cluster before the first test (preflight)"}


class _FormerSpelling(argparse.Action):
    """A spelling the plugin dropped: one line naming the one to use (pytest exits 4 with it)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        raise pytest.UsageError(settings.former_spelling(option or self.option_strings[0]) or str(option))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite's options, grouped by what they are about; the shared settings come from one table."""
    # pytest lists groups in the order they are first asked for: this module registers first (plugin/__init__.py).
    group = parser.getgroup(GROUP, "DRA conformance: cluster and driver under test")
    for name in ("reports", "verdict", "rbac", "scenarios", "metrics", "rollback", "deadlines"):
        parser.getgroup(f"{GROUP}-{name}", GROUP_TITLES[name])
    group.addoption(
        "--dra-conformance",
        action="store_true",
        help="opt this run in to DRA conformance; also implied by any other --dra-* option, by collecting the "
        "bundled suites, and by a test using one of the plugin's fixtures (without any of these the plugin does "
        "nothing)",
    )
    reports = parser.getgroup(f"{GROUP}-reports")
    for setting in settings.SHARED:
        (reports if setting.name == "reports-dir" else group).addoption(
            setting.plugin_option,
            type=PLUGIN_TYPES[setting.kind],
            choices=setting.choices or None,
            default=None,
            metavar=setting.metavar or None,
            help=setting.help_text() + CLUSTER_PREFLIGHT.get(setting.name, ""),
        )
    for old in settings.RENAMED:
        group.addoption(settings.PLUGIN_PREFIX + old, action=_FormerSpelling)
    parser.getgroup(f"{GROUP}-verdict").addoption(
        "--dra-strictness",
        choices=("contract", "strict"),
        default=None,
        help="contract: defensive findings are advisories; strict: they fail (default: the profile's strictness)",
    )
    group.addoption(
        "--dra-real-node",
        action="store_true",
        help="add a real node to a local cluster (kubelet, containerd, runc; root) for the kubelet-mode checks",
    )
    group.addoption(
        "--dra-replace-driver",
        action="store_true",
        help="a running local cluster of the state directory with another profile's driver gets this profile's "
        "driver instead (control plane, nodes and metrics adapter kept); else such a run is refused",
    )
    group.addoption(
        "--dra-real-node-absent",
        default=None,
        metavar="WHY",
        help="why the run has no real node (`dra-conformance run --real-node auto` says it), for the summary",
    )
    group.addoption(
        "--dra-node-sockets",
        choices=("auto", "relay"),
        default=None,
        help="on a cluster the suite did not build, how socket-level checks reach the driver's sockets on nodes real "
        "kubelets serve: auto, the default (in place where a node's file system is this machine's, else through "
        "the node agent's relay), or relay (always through the relay); the relay needs create pods/portforward",
    )
    group.addoption(
        "--dra-workload-image",
        default=None,
        help="image with a shell (busybox) that kubelet-mode pods run; the nodes must have it or be able to pull it "
        "(default: the local real node's own, else a busybox image the node lists in its status, else busybox:1.36)",
    )
    group.addoption(
        "--dra-allow-partial",
        action="store_true",
        help="when the preflight finds the suite's identity lacking rights some suites need, run anyway and skip "
        "those suites' checks as not applicable (default: refuse the run; `dra-conformance run --allow-partial`)",
    )
    group.addoption("--dra-keep-cluster", action="store_true", help="leave a cluster this run started running")
    group.addoption(
        "--dra-keep-cluster-for-next-run",
        action="store_true",
        help="leave the cluster running for the next run in this process, which still owns it (how `dra-conformance "
        "run --repeat N` chains its runs; the last run stops it)",
    )
    group.addoption(
        "--dra-keep-resources",
        action="store_true",
        help="do not delete what tests created (debugging; leaks are then expected)",
    )
    group.addoption("--dra-audit-log", type=Path, default=None, help="kube-apiserver audit log of an existing cluster")
    reports.addoption(
        "--dra-phases-file",
        type=Path,
        default=None,
        help="append per test phase its duration and every wait (what, seconds, deadline) as JSON lines",
    )
    deadlines = parser.getgroup(f"{GROUP}-deadlines")
    for name in Timeouts.names():
        deadlines.addoption(
            timeout_option(name),
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"override the {name} deadline (default {getattr(Timeouts(), name):g}s)",
        )


def suite_config_from(config: pytest.Config) -> SuiteConfig:
    """The run's settings; a bad value is a `pytest.UsageError` (one line, exit 4)."""
    overrides = {
        name: value for name in Timeouts.names() if (value := config.getoption(timeout_option(name))) is not None
    }
    bad = [f"{timeout_option(name)}={value}" for name, value in overrides.items() if value <= 0]
    if bad:
        raise pytest.UsageError(f"timeouts must be positive: {', '.join(bad)}")
    nodes = option_or(config, "--dra-nodes", SuiteConfig.nodes)
    if nodes < 1:
        raise pytest.UsageError(f"--dra-nodes must be at least 1, got {nodes}")
    backend = config.getoption("--dra-cluster") or "local"
    kubeconfig = config.getoption("--dra-kubeconfig")
    if backend == "existing" and kubeconfig is None:
        kubeconfig = settings.kubeconfig_from(os.environ)  # $KUBECONFIG, as kubectl reads it
    suite = SuiteConfig(
        backend=backend,
        kubeconfig=kubeconfig,
        context=config.getoption("--dra-context"),
        nodes=nodes,
        state_dir=config.getoption("--dra-state-dir"),
        cache_dir=config.getoption("--dra-cache-dir"),
        keep_cluster=config.getoption("--dra-keep-cluster"),
        metrics=option_or(config, "--dra-metrics", SuiteConfig.metrics),
        audit_log=config.getoption("--dra-audit-log"),
        profile=config.getoption("--dra-profile"),
        real_node=config.getoption("--dra-real-node"),
        real_nodes=option_or(config, "--dra-real-nodes", SuiteConfig.real_nodes),
        replace_driver=config.getoption("--dra-replace-driver"),
        timeouts=Timeouts().override(**overrides),
    )
    if suite.backend == "existing" and suite.kubeconfig is None:
        # The backend says so with the CLI's flags (`--cluster`, `--kubeconfig`); here the user typed the plugin's.
        raise pytest.UsageError("--dra-cluster=existing needs --dra-kubeconfig (or $KUBECONFIG)")
    try:
        make_backend(suite)  # validates the backend's own inputs (kubeconfig, context) without side effects
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None
    return suite


def cluster_named(config: pytest.Config) -> bool:
    """True when the command line names the cluster (`--dra-cluster`): then it is checked before the first test."""
    return config.getoption("--dra-cluster") is not None


def option_or(config: pytest.Config, name: str, default: T) -> T:
    """The value of the plugin's option `name`, else the `default` it stands for."""
    value: T | None = config.getoption(name)
    return default if value is None else value


def options_given(config: pytest.Config) -> list[str]:
    """The plugin's options this run gives a value: on the command line, in addopts or in PYTEST_ADDOPTS."""
    return sorted(
        OPTION_PREFIX + dest.removeprefix(DEST_PREFIX).replace("_", "-")
        for dest, value in vars(config.option).items()
        if dest.startswith(DEST_PREFIX) and value is not None and value is not False
    )

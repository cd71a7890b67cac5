"""The plugin's command-line options, and the run's `SuiteConfig` built from them.

Every option of the plugin is named `--dra-*` and defaults to None (False for a flag): a value means the run
asked for DRA conformance (see `plugin.opt_in`). The default an option stands for is applied where it is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import pytest

from dra_conformance.backends.registry import BACKENDS, make_backend
from dra_conformance.config import METRICS_IMPLEMENTATIONS, SuiteConfig
from dra_conformance.errors import UsageError
from dra_conformance.timeouts import Timeouts, timeout_option

T = TypeVar("T")

# Every option of the plugin is `--dra-<name>`, in this help group; argparse stores it as `dra_<name>`.
GROUP = "dra-conformance"
OPTION_PREFIX = "--dra-"
DEST_PREFIX = "dra_"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite's options in one group."""
    group = parser.getgroup(GROUP, "DRA conformance")
    group.addoption(
        "--dra-conformance",
        action="store_true",
        help="opt this run in to DRA conformance; also implied by any other --dra-* option, by collecting the "
        "bundled suites, and by a test using one of the plugin's fixtures (without any of these the plugin does "
        "nothing)",
    )
    group.addoption(
        "--dra-cluster",
        choices=tuple(BACKENDS),
        default=None,
        help="cluster backend: local (embedded, the default) or existing (needs --dra-kubeconfig); naming it "
        "checks the cluster before the first test (preflight)",
    )
    group.addoption("--dra-kubeconfig", type=Path, default=None, help="kubeconfig of an existing cluster")
    group.addoption(
        "--dra-profile",
        type=Path,
        default=None,
        help="driver profile of the driver under test (default: the reference driver's bundled profile)",
    )
    group.addoption("--dra-context", default=None, help="kubeconfig context (default: current context)")
    group.addoption(
        "--dra-strictness",
        choices=("contract", "strict"),
        default=None,
        help="contract: defensive findings are advisories; strict: they fail (default: the profile's strictness)",
    )
    group.addoption(
        "--dra-nodes", type=int, default=None, help=f"fake nodes of a local cluster (default {SuiteConfig.nodes})"
    )
    group.addoption(
        "--dra-cluster-state-dir",
        type=Path,
        default=None,
        help="state directory of the local cluster (default reports/clusters/local)",
    )
    group.addoption(
        "--dra-metrics-implementation",
        choices=METRICS_IMPLEMENTATIONS,
        default=None,
        help=f"Metrics API of a local cluster: fake (reference adapter, v1+v1beta1), metrics-server, none "
        f"(default {SuiteConfig.metrics})",
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
    group.addoption("--dra-reports-dir", type=Path, default=None, help="report root (default <rootdir>/reports)")
    group.addoption(
        "--dra-phases-file",
        type=Path,
        default=None,
        help="append per test phase its duration and every wait (what, seconds, deadline) as JSON lines",
    )
    for name in Timeouts.names():
        group.addoption(
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
    suite = SuiteConfig(
        backend=config.getoption("--dra-cluster") or "local",
        kubeconfig=config.getoption("--dra-kubeconfig"),
        context=config.getoption("--dra-context"),
        nodes=nodes,
        state_dir=config.getoption("--dra-cluster-state-dir"),
        keep_cluster=config.getoption("--dra-keep-cluster"),
        metrics=option_or(config, "--dra-metrics-implementation", SuiteConfig.metrics),
        audit_log=config.getoption("--dra-audit-log"),
        profile=config.getoption("--dra-profile"),
        real_node=config.getoption("--dra-real-node"),
        replace_driver=config.getoption("--dra-replace-driver"),
        timeouts=Timeouts().override(**overrides),
    )
    if suite.backend == "existing" and suite.kubeconfig is None:
        # The backend says so with the CLI's flags (`--cluster`, `--kubeconfig`); here the user typed the plugin's.
        raise pytest.UsageError("--dra-cluster=existing needs --dra-kubeconfig")
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

"""The plugin's command-line options, and the run's `SuiteConfig` built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.backends.registry import BACKENDS, make_backend
from dra_conformance.config import METRICS_IMPLEMENTATIONS, SuiteConfig
from dra_conformance.errors import UsageError
from dra_conformance.timeouts import Timeouts


def timeout_option(name: str) -> str:
    """The option that overrides the deadline `name`: `--dra-timeout-<name with dashes>`."""
    return "--dra-timeout-" + name.replace("_", "-")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite's options in one group."""
    group = parser.getgroup("dra-conformance", "DRA conformance")
    group.addoption(
        "--cluster",
        choices=tuple(BACKENDS),
        default=None,
        help="cluster backend: local (embedded, the default) or existing (needs --kubeconfig); naming it "
        "checks the cluster before the first test (preflight)",
    )
    group.addoption("--kubeconfig", type=Path, default=None, help="kubeconfig of an existing cluster")
    group.addoption(
        "--profile",
        type=Path,
        default=None,
        help="driver profile of the driver under test (default: the reference driver's bundled profile)",
    )
    group.addoption("--context", default=None, help="kubeconfig context (default: current context)")
    group.addoption(
        "--strictness",
        choices=("contract", "strict"),
        default=None,
        help="contract: defensive findings are advisories; strict: they fail (default: the profile's strictness)",
    )
    group.addoption("--nodes", type=int, default=SuiteConfig.nodes, help="fake nodes of a local cluster")
    group.addoption(
        "--cluster-state-dir",
        type=Path,
        default=None,
        help="state directory of the local cluster (default reports/clusters/local)",
    )
    group.addoption(
        "--metrics-implementation",
        choices=METRICS_IMPLEMENTATIONS,
        default="fake",
        help="Metrics API of a local cluster: fake (reference adapter, v1+v1beta1), metrics-server, none",
    )
    group.addoption(
        "--real-node",
        action="store_true",
        help="add a real node to a local cluster (kubelet, containerd, runc; root) for the kubelet-mode checks",
    )
    group.addoption(
        "--workload-image",
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
    group.addoption("--keep-cluster", action="store_true", help="leave a cluster this run started running")
    group.addoption(
        "--keep-cluster-for-next-run",
        action="store_true",
        help="leave the cluster running for the next run in this process, which still owns it (how `dra-conformance "
        "run --repeat N` chains its runs; the last run stops it)",
    )
    group.addoption(
        "--keep-resources",
        action="store_true",
        help="do not delete what tests created (debugging; leaks are then expected)",
    )
    group.addoption("--audit-log", type=Path, default=None, help="kube-apiserver audit log of an existing cluster")
    group.addoption("--reports-dir", type=Path, default=None, help="report root (default <rootdir>/reports)")
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
    nodes = config.getoption("--nodes")
    if nodes < 1:
        raise pytest.UsageError(f"--nodes must be at least 1, got {nodes}")
    suite = SuiteConfig(
        backend=config.getoption("--cluster") or "local",
        kubeconfig=config.getoption("--kubeconfig"),
        context=config.getoption("--context"),
        nodes=nodes,
        state_dir=config.getoption("--cluster-state-dir"),
        keep_cluster=config.getoption("--keep-cluster"),
        metrics=config.getoption("--metrics-implementation"),
        audit_log=config.getoption("--audit-log"),
        profile=config.getoption("--profile"),
        real_node=config.getoption("--real-node"),
        timeouts=Timeouts().override(**overrides),
    )
    try:
        make_backend(suite)  # validates the backend's own inputs (kubeconfig, context) without side effects
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None
    return suite


def cluster_named(config: pytest.Config) -> bool:
    """True when the command line names the cluster (`--cluster`): then it is checked before the first test."""
    return config.getoption("--cluster") is not None

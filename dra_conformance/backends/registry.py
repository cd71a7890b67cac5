"""Cluster backends by name: the one map from `SuiteConfig.backend` to a backend."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from dra_conformance import paths
from dra_conformance.backends.base import ClusterBackend
from dra_conformance.backends.existing import ExistingBackend, ExistingClusterConfig
from dra_conformance.backends.kind import KindBackend, KindClusterConfig
from dra_conformance.backends.local import host_packages
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig, wanted_components
from dra_conformance.backends.local.build import (
    REFERENCE_DRIVER_GO,
    SLICE_ALLOCATOR,
    SONOBUOY,
    BinaryBuilder,
    Component,
    echo_stderr,
    select,
    socket_relay,
    socket_relay_name,
)
from dra_conformance.backends.local.real_node_host import CGROUP_ROOT
from dra_conformance.backends.local.run_claims import RunClaims as RunClaims
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import UsageError

# Fake nodes of a local cluster: each runs a driver process of its own (tens of MB, a pool to publish and watch), so
# a hundred already take a few GB beside the control plane; the scale benchmark grows further nodes by itself.
MAX_LOCAL_NODES = 100


def local_cluster_config(config: SuiteConfig, owner_pid: int | None) -> LocalClusterConfig:
    """The local backend's settings derived from a run's settings."""
    defaults = LocalClusterConfig()
    return LocalClusterConfig(
        state_dir=config.state_dir or defaults.state_dir,
        cache_dir=config.cache_dir or defaults.cache_dir,
        nodes=config.nodes,
        metrics=config.metrics,
        timeouts=config.timeouts,
        owner_pid=owner_pid,
        profile=config.profile or defaults.profile,
        real_node=config.real_node,
        real_nodes=config.real_nodes,
        replace_driver=config.replace_driver,
    )


def _local(config: SuiteConfig, owner_pid: int | None) -> ClusterBackend:
    if not 1 <= config.nodes <= MAX_LOCAL_NODES:
        raise UsageError(f"--nodes must be between 1 and {MAX_LOCAL_NODES} on a local cluster, got {config.nodes}")
    return LocalBackend(local_cluster_config(config, owner_pid))


def _existing(config: SuiteConfig, _owner_pid: int | None) -> ClusterBackend:
    if config.kubeconfig is None:
        raise UsageError("--cluster=existing needs --kubeconfig")
    return ExistingBackend(ExistingClusterConfig(config.kubeconfig, config.context, config.audit_log, config.profile))


def kind_cluster_config(config: SuiteConfig, owner_pid: int | None) -> KindClusterConfig:
    """The kind backend's settings: its files go to the state directory (`--cluster-state-dir`), `--nodes` workers."""
    defaults = KindClusterConfig()
    return KindClusterConfig(
        state_dir=config.state_dir or defaults.state_dir,
        profile=config.profile or defaults.profile,
        workers=config.nodes,
        timeouts=config.timeouts,
        owner_pid=owner_pid,
    )


def _kind(config: SuiteConfig, owner_pid: int | None) -> ClusterBackend:
    if config.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {config.nodes}")
    return KindBackend(kind_cluster_config(config, owner_pid))


# name -> factory(settings, owner pid); the first entry is the default.
BACKENDS: dict[str, Callable[[SuiteConfig, int | None], ClusterBackend]] = {
    "local": _local,
    "existing": _existing,
    "kind": _kind,
}


def run_claims(backend: ClusterBackend) -> RunClaims | None:
    """The claims of runs on `backend`'s cluster where one run at a time holds it (a local cluster); else None."""
    return RunClaims(backend.layout.root) if isinstance(backend, LocalBackend) else None


def make_backend(config: SuiteConfig, *, owner_pid: int | None = None) -> ClusterBackend:
    """Return the backend `config.backend` names; `owner_pid` ties a local cluster's life to that process."""
    factory = BACKENDS.get(config.backend)
    if factory is None:
        raise UsageError(f"unknown cluster backend {config.backend!r}; choose one of {', '.join(BACKENDS)}")
    return factory(config, owner_pid)


def local_components(config: SuiteConfig, *, everything: bool = False) -> tuple[Component, ...]:
    """The components a local cluster with `config`'s profile and Metrics API runs (all of them: `everything`).

    What every local cluster runs, plus metrics-server for `--metrics metrics-server` and each pinned binary the
    profile's commands name (`{bin:dra_test_driver}`); the real node's are `BinaryBuilder.ensure_real_node`'s.
    """
    if everything:
        return select(everything=True)
    local = local_cluster_config(config, owner_pid=None)
    return select(wanted_components(load_profile(local.profile), local.metrics))


def build_local_binaries(config: SuiteConfig, *, everything: bool = False) -> dict[str, Path]:
    """Build (or find in the cache) the pinned binaries the local backend runs: component name -> path.

    Those a cluster with `config` runs (`local_components`), or every one (`everything`). With `config.real_node`,
    also the real node's, after installing the Debian packages its build and its node need.
    """
    builder = _binary_builder(config)
    selected = local_components(config, everything=everything)
    binaries = builder.ensure_selected(selected).built()
    skipped = [component.name for component in select(everything=True) if component not in selected]
    if skipped:
        echo_stderr(f"not built, as a cluster with this profile and --metrics runs none: {', '.join(skipped)} (--all)")
    if config.real_node:
        host_packages.install(real_node_packages(), echo_stderr)
        binaries |= vars(builder.ensure_real_node())
    return dict(sorted(binaries.items()))


def real_node_packages() -> Path:
    """The Debian packages the real node's build and its node need (one per line)."""
    return LocalClusterConfig().assets / "real-node" / "debian-packages.txt"


def real_node_blocker() -> str:
    """Why this machine cannot host the local backend's real node, or "" when it can."""
    if os.geteuid() != 0:
        return "not root (the real node runs a kubelet, containerd and runc, which need root)"
    if not os.access(CGROUP_ROOT, os.W_OK):
        return f"{CGROUP_ROOT} is not writable (the kubelet makes a cgroup per pod)"
    absent = host_packages.missing(host_packages.listed(real_node_packages()))
    if absent and shutil.which("apt-get") is None:
        return f"Debian packages {' '.join(absent)} are missing and there is no apt-get to install them"
    return ""


def install_real_node_packages() -> None:
    """Install the real node's missing Debian packages (root), as `build --real-node` does."""
    host_packages.install(real_node_packages(), echo_stderr)


def install_host_packages(list_file: Path, needed_by: str) -> None:
    """Install the Debian packages `list_file` names and the host lacks (root); elsewhere one line naming them."""
    host_packages.install(list_file, echo_stderr, needed_by)


def _binary_builder(config: SuiteConfig) -> BinaryBuilder:
    """The builder of the pinned binaries into `config`'s build cache, reporting on stderr."""
    local = local_cluster_config(config, owner_pid=None)
    return BinaryBuilder(local.assets, local.cache_dir, timeout=local.timeouts.build, echo=echo_stderr)


def build_sonobuoy(config: SuiteConfig) -> Path:
    """Build (or find in the cache) the pinned Sonobuoy binary, like the local backend's own binaries."""
    return _binary_builder(config).ensure(SONOBUOY)


def build_slice_allocator(config: SuiteConfig) -> Path:
    """Build (or find in the cache) `slices check`'s allocator program, like the local backend's own binaries."""
    return _binary_builder(config).ensure(SLICE_ALLOCATOR)


def build_reference_driver_go(config: SuiteConfig) -> Path:
    """Build (or find in the cache) the reference driver's Go build, the binary its image ships."""
    return _binary_builder(config).ensure(REFERENCE_DRIVER_GO)


def build_socket_relay(config: SuiteConfig, architecture: str) -> Path:
    """The node agent's socket relay for nodes of `architecture` (GOARCH).

    The suite image's own where there is one, else built (or found in the cache) like the local backend's binaries.
    """
    prebuilt = paths.prebuilt_binary(socket_relay_name(architecture))
    if prebuilt is not None:
        return prebuilt
    return _binary_builder(config).ensure(socket_relay(architecture))


def socket_relays(config: SuiteConfig, architectures: tuple[str, ...]) -> dict[str, Path]:
    """The socket relay for each of `architectures`, by the file name an image of the suite ships it under."""
    return {socket_relay_name(arch): build_socket_relay(config, arch) for arch in architectures}

"""A local cluster that runs of one test module share one after another, each with its own driver swapped in.

Starting a cluster costs about 20 s and 30 CPU-seconds on two cores; tests that run the suites against many
drivers (the mutants, the reference driver's legitimate variants) pay it once. `swap_in` replaces the driver of
the running cluster (`--replace-driver`): the old driver's processes, slices, RBAC and node directories go, the new
one starts as on a new cluster. This process holds the cluster, so it stops when this process ends.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.driver import confinement
from dra_conformance.errors import ConformanceError


def swap_in(profile: Path, cluster: Path, nodes: int) -> str | None:
    """Start the cluster in `cluster` with `profile`'s driver on `nodes` fake nodes, or swap its driver for it.

    Returns why the driver did not start (None once it runs): a run against it would give no verdict either.
    """
    config = LocalClusterConfig(
        state_dir=cluster, nodes=nodes, profile=profile, owner_pid=os.getpid(), replace_driver=True
    )
    try:
        LocalBackend(config, echo=lambda _: None).start()
    except ConformanceError as error:
        return f"driver did not start: {error}"
    return None


def stop_shared_cluster(cluster: Path) -> None:
    """Stop the cluster `swap_in` started in `cluster` (a no-op if none runs)."""
    LocalBackend(LocalClusterConfig(state_dir=cluster)).stop()


def renamed_reference_profile(directory: Path, driver: str, devices: int | None = None) -> Path:
    """The reference driver's profile under another driver name (and device count), written to `directory`.

    Its RBAC paths are made absolute, and allowed as host paths, so the copy works from anywhere.
    """
    source = paths.reference_driver_profile()
    profile = yaml.safe_load(source.read_text())
    profile["driver"] = driver
    if devices is not None:
        profile["devices"]["perNode"] = devices
    for identity in (profile["identity"], profile["identity"]["controller"]):
        identity["rbac"] = [str((source.parent / path).resolve()) for path in identity["rbac"]]
    profile["hostPaths"] = confinement.host_paths_of_copy(profile, source.parent)
    path = directory / f"{driver}.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path

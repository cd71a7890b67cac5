"""A start that writes the API server's default RBAC objects from a record ends with the objects the server writes.

Two private clusters (warm start ~3 s each): one without a record (the API server's hook writes the objects, and the
start records them), then one with it (written before the hook's first try). Their default roles and bindings must
be the same, or the record would make our clusters differ from any other of this Kubernetes version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_conformance.backends.local import bootstrap_rbac
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.timeouts import Timeouts


def _defaults(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    """The cluster's default RBAC objects as the record keeps them, by kind/namespace/name."""
    found = bootstrap_rbac.listed(client_from_kubeconfig(kubeconfig))
    return {
        f"{kind}/{item['metadata'].get('namespace', '')}/{item['metadata']['name']}": item
        for kind, items in found.items()
        for item in items
    }


def _start(state_dir: Path, records: Path, timeouts: Timeouts) -> tuple[LocalBackend, dict[str, float]]:
    config = LocalClusterConfig(
        state_dir=state_dir, nodes=1, metrics="none", timeouts=timeouts, bootstrap_rbac_dir=records
    )
    backend = LocalBackend(config)
    info = backend.start()
    return backend, {k: float(v) for k, v in info.details.items() if k.startswith("startup.")}


def test_a_start_from_the_record_ends_with_the_default_rbac_objects_the_api_server_writes(
    tmp_path: Path, timeouts: Timeouts
) -> None:
    # A record directory of its own: the build cache's record is shared with concurrent starts, which write it too.
    records = tmp_path / "records"
    unseeded, phases = _start(tmp_path / "unseeded", records, timeouts)
    try:
        assert "startup.bootstrap_rbac" not in phases, f"a start without a record wrote one: {phases}"
        recorded = sorted(records.glob("*.json"))
        assert len(recorded) == 1, (
            f"the start did not record the default RBAC objects (one file) in {records}: {recorded}"
        )
        assert bootstrap_rbac.BootstrapRbac(recorded[0]).recorded() is not None, f"{recorded[0]} is not a usable record"
        written_by_the_hook = _defaults(unseeded.layout.kubeconfig)
    finally:
        unseeded.stop()

    seeded, phases = _start(tmp_path / "seeded", records, timeouts)
    try:
        assert "startup.bootstrap_rbac" in phases, f"a start with a record did not write from it: {phases}"
        written_from_the_record = _defaults(seeded.layout.kubeconfig)
    finally:
        seeded.stop()

    only_hook = sorted(written_by_the_hook.keys() - written_from_the_record.keys())
    only_record = sorted(written_from_the_record.keys() - written_by_the_hook.keys())
    assert not only_hook and not only_record, (
        f"objects only the hook wrote: {only_hook}; only the record: {only_record}"
    )
    differing = [key for key, item in written_by_the_hook.items() if written_from_the_record[key] != item]
    assert not differing, (
        f"{len(differing)} of {len(written_by_the_hook)} default RBAC objects differ from the hook's, e.g. "
        f"{differing[0]}: hook {written_by_the_hook[differing[0]]}, record {written_from_the_record[differing[0]]}"
        if differing
        else ""
    )
    assert len(written_by_the_hook) > 100, (
        f"only {len(written_by_the_hook)} default RBAC objects: {sorted(written_by_the_hook)}"
    )

"""Every mutant (a broken mode of the reference driver, or a broken RBAC manifest) is caught by the check meant for it.

The broken driver runs as the driver under test from a profile, like a vendor's binary, swapped into a cluster the
mutants share (a fresh driver each time: its processes, slices, RBAC and node directories are replaced);
the named check must fail against it (see `tests.mutants.harness`). A mutant that survives means the check proves
nothing. bench/mutants runs the same mutants and prints the table and the score.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mutants.broken_modes import BrokenMode
from tests.mutants.harness import MUTANTS, Mutant, arbitrary_node_rbac, assert_caught
from tests.shared_cluster import stop_shared_cluster

# One cluster for the mutants, one after the other: each swaps its driver in (a cluster start per mutant cost ~30
# CPU-seconds, a third of CI's time), and two clusters at once on two cores would starve the other tests.
pytestmark = pytest.mark.xdist_group("mutants")


@pytest.fixture(scope="module")
def mutant_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The state directory of the cluster the mutants share (started by the first); stopped after the last."""
    cluster = tmp_path_factory.mktemp("mutant-cluster") / "cluster"
    try:
        yield cluster
    finally:
        stop_shared_cluster(cluster)


def test_every_broken_mode_has_a_mutant_with_a_check_meant_to_catch_it() -> None:
    covered = {mode for mutant in MUTANTS for mode in mutant.modes}
    assert covered == set(BrokenMode), f"modes without a check: {sorted(set(BrokenMode) - covered)}"
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names)), f"mutant names repeat: {names}"


def test_arbitrary_node_rbac_adds_only_the_arbitrary_node_verb(tmp_path: Path) -> None:
    source = tmp_path / "rbac.yaml"
    source.write_text(
        "kind: ClusterRole\nrules:\n"
        "- {apiGroups: [resource.k8s.io], resources: [resourceclaims/driver], verbs: ['associated-node:patch']}\n"
        "- {apiGroups: [resource.k8s.io], resources: [resourceslices], verbs: [get]}\n"
        "---\nkind: ServiceAccount\nmetadata: {name: x}\n"
    )
    broken = arbitrary_node_rbac(source, tmp_path).read_text()
    assert "- arbitrary-node:patch" in broken and broken.count("arbitrary-node") == 1, broken
    assert "kind: ServiceAccount" in broken, broken


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if not m.shipped], ids=str)
def test_mutant_is_caught_by_its_check(mutant: Mutant, tmp_path: Path, mutant_cluster: Path) -> None:
    assert_caught(mutant, tmp_path, mutant_cluster)

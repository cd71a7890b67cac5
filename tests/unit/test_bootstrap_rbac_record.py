"""The record of the API server's default RBAC objects: what it keeps, and that a damaged one is not used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_conformance.backends.local.bootstrap_rbac import KINDS, BootstrapRbac, as_recorded, record_path


def test_a_record_keeps_what_the_objects_creator_wrote_and_leaves_aggregated_rules_to_their_controller() -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "admin",
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-04T00:00:00Z",
            "managedFields": [{}],
        },
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]},
        "rules": [{"verbs": ["get"]}],
    }
    kept = as_recorded(role)
    assert set(kept["metadata"]) == {"name", "labels", "annotations"}, kept["metadata"]
    assert "rules" not in kept and kept["aggregationRule"] == role["aggregationRule"], kept
    plain = as_recorded({**role, "aggregationRule": None})
    assert plain["rules"] == role["rules"], plain


def test_each_api_server_binary_has_its_own_record(tmp_path: Path) -> None:
    first = record_path(tmp_path, tmp_path / "bin" / "kube-v1.37.2-aaaa" / "kube")
    second = record_path(tmp_path, tmp_path / "bin" / "kube-v1.37.3-bbbb" / "kube")
    assert first != second and first.parent == second.parent == tmp_path, (first, second)


@pytest.mark.parametrize(
    "content",
    ["", "{not json", json.dumps([]), json.dumps({"ClusterRole": []}), json.dumps({kind: [] for kind in KINDS[:-1]})],
)
def test_a_missing_or_damaged_record_is_not_used(tmp_path: Path, content: str) -> None:
    path = tmp_path / "record.json"
    path.write_text(content)
    assert BootstrapRbac(path).recorded() is None, content
    assert BootstrapRbac(tmp_path / "absent.json").recorded() is None


def test_a_whole_record_is_used(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    whole = {kind: [{"metadata": {"name": kind.lower()}}] for kind in KINDS}
    path.write_text(json.dumps(whole))
    assert BootstrapRbac(path).recorded() == whole

"""The read-exposure finder's pure logic, without a cluster.

Which RBAC rules and bindings propose a claim reader beyond its namespace, the allowlist file's schema, and the
finding as the summary carries it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_conformance.errors import FixtureError
from dra_conformance.model.read_exposure import markdown_line, summary_finding
from dra_conformance.model.records import RunRecords
from dra_conformance.rbac import read_allowlist
from dra_conformance.rbac.claim_readers import (
    Candidate,
    RbacSnapshot,
    Subject,
    candidates,
    reaches_beyond_home,
    role_rules,
    rule_read_verbs,
)
from dra_conformance.rbac.read_exposure import RECORD_KIND, Reader, finding
from dra_conformance.report.certification import render_markdown, summarize
from dra_conformance.verdict import RunFacts

READ = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]}
SA = Subject("ServiceAccount", "reader", "tools")


@pytest.mark.parametrize(
    ("rule", "verbs"),
    [
        (READ, {"get", "list", "watch"}),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"get", "list", "watch"}),
        ({"apiGroups": ["resource.k8s.io"], "resources": ["*"], "verbs": ["list"]}, {"list"}),
        ({"apiGroups": ["*"], "resources": ["resourceclaims"], "verbs": ["watch", "delete"]}, {"watch"}),
        ({**READ, "verbs": ["create", "update", "patch", "delete"]}, set()),
        ({**READ, "resources": ["resourceclaims/status"]}, set()),
        ({**READ, "resources": ["*/status"]}, set()),
        ({**READ, "resources": ["resourceclaimtemplates", "resourceslices"]}, set()),
        ({**READ, "apiGroups": [""]}, set()),
        ({**READ, "resourceNames": ["one-claim"]}, set()),
        ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, set()),
    ],
    ids=[
        "explicit",
        "all-wildcards",
        "resources-wildcard",
        "group-wildcard",
        "write-verbs-only",
        "status-subresource",
        "any-status-subresource",
        "other-resources",
        "core-group",
        "named-claims-only",
        "non-resource-url",
    ],
)
def test_a_rule_grants_claim_reads_exactly_for_get_list_watch_on_every_resourceclaim(
    rule: dict[str, Any], verbs: set[str]
) -> None:
    assert rule_read_verbs(rule) == verbs, f"rule {rule}"


@pytest.mark.parametrize(
    ("subject", "binding_namespace", "beyond"),
    [
        (SA, "", True),
        (SA, "other", True),
        (SA, "tools", False),
        (Subject("User", "jane"), "", True),
        (Subject("User", "jane"), "team-a", False),
        (Subject("Group", "team-a-devs"), "team-a", False),
        (Subject("Group", "system:serviceaccounts:tools"), "tools", False),
        (Subject("Group", "system:serviceaccounts:tools"), "other", True),
        (Subject("Group", "system:serviceaccounts"), "team-a", True),
        (Subject("Group", "system:authenticated"), "team-a", True),
    ],
)
def test_a_grant_reaches_beyond_home_for_cluster_bindings_and_foreign_namespaces(
    subject: Subject, binding_namespace: str, beyond: bool
) -> None:
    assert reaches_beyond_home(subject, binding_namespace) is beyond


def _meta(name: str, namespace: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {}), **({"labels": labels} if labels else {})}


def _binding(
    name: str, role_kind: str, role: str, subjects: list[dict[str, str]], namespace: str = ""
) -> dict[str, Any]:
    return {
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def _sa(namespace: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "namespace": namespace, "name": name}


def _snapshot() -> RbacSnapshot:
    cluster_roles: list[dict[str, Any]] = [
        {"metadata": _meta("claim-reader"), "rules": [READ]},
        {"metadata": _meta("pods-only"), "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]},
        # An aggregated role whose controller has not copied the rules yet: the selected role's rules count.
        {
            "metadata": _meta("aggregated"),
            "aggregationRule": {
                "clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-readers": "true"}}]
            },
            "rules": [],
        },
        {
            "metadata": _meta("claims-list-piece", labels={"example.com/aggregate-to-readers": "true"}),
            "rules": [{**READ, "verbs": ["list"]}],
        },
    ]
    roles = [{"metadata": _meta("ns-reader", "team-a"), "rules": [{**READ, "verbs": ["get"]}]}]
    cluster_role_bindings = [
        _binding("broad", "ClusterRole", "claim-reader", [_sa("tools", "reader"), {"kind": "User", "name": "jane"}]),
        _binding("pods", "ClusterRole", "pods-only", [_sa("tools", "pods")]),
        _binding("agg", "ClusterRole", "aggregated", [{"kind": "Group", "name": "auditors"}]),
        _binding("dangling", "ClusterRole", "no-such-role", [_sa("tools", "ghost")]),
    ]
    role_bindings = [
        # A ServiceAccount of another namespace, bound in team-a: beyond its home.
        _binding("cross", "Role", "ns-reader", [_sa("tools", "reader"), _sa("team-a", "local")], "team-a"),
        # A person given team-a: not beyond (users have no namespace).
        _binding("people", "ClusterRole", "claim-reader", [{"kind": "User", "name": "bob"}], "team-a"),
        _binding(
            "everyone", "ClusterRole", "claim-reader", [{"kind": "Group", "name": "system:authenticated"}], "team-b"
        ),
    ]
    return RbacSnapshot(cluster_roles, cluster_role_bindings, roles, role_bindings)


def test_candidates_are_every_subject_whose_binding_reaches_claims_beyond_its_namespace() -> None:
    found = {(str(c.subject), c.scope): (sorted(c.verbs), c.via) for c in candidates(_snapshot())}
    assert found == {
        ("ServiceAccount/tools/reader", ""): (
            ["get", "list", "watch"],
            ["ClusterRoleBinding broad -> ClusterRole claim-reader"],
        ),
        ("User/jane", ""): (["get", "list", "watch"], ["ClusterRoleBinding broad -> ClusterRole claim-reader"]),
        ("Group/auditors", ""): (["list"], ["ClusterRoleBinding agg -> ClusterRole aggregated"]),
        ("ServiceAccount/tools/reader", "team-a"): (["get"], ["RoleBinding team-a/cross -> Role ns-reader"]),
        ("Group/system:authenticated", "team-b"): (
            ["get", "list", "watch"],
            ["RoleBinding team-b/everyone -> ClusterRole claim-reader"],
        ),
    }


def test_an_aggregated_role_takes_the_rules_of_the_roles_its_selectors_match() -> None:
    def role(name: str, labels: dict[str, str], verb: str) -> dict[str, Any]:
        return {"metadata": _meta(name, labels=labels), "rules": [{**READ, "verbs": [verb]}]}

    pieces = [
        role("tier-gold", {"tier": "gold"}, "get"),
        role("tier-gold-private", {"tier": "gold", "private": "yes"}, "list"),
        role("tier-bronze", {"tier": "bronze"}, "watch"),
        role("unlabelled", {}, "delete"),
    ]
    selector = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}
    selector["matchExpressions"].append({"key": "private", "operator": "DoesNotExist"})
    aggregated = {"metadata": _meta("agg"), "aggregationRule": {"clusterRoleSelectors": [selector]}}
    assert [rule["verbs"] for rule in role_rules(aggregated, [aggregated, *pieces])] == [["get"]]
    every = {"metadata": _meta("agg"), "aggregationRule": {"clusterRoleSelectors": [{}]}}
    assert len(role_rules(every, pieces)) == len(pieces), "an empty selector selects every ClusterRole"


def test_subject_access_reviews_ask_for_the_subject_alone() -> None:
    assert SA.review_identity() == {"user": "system:serviceaccount:tools:reader"}
    assert Subject("User", "jane").review_identity() == {"user": "jane"}
    group = Subject("Group", "auditors").review_identity()
    assert group["groups"] == ["auditors"] and group["user"].startswith("dra-conformance:")
    assert Subject.from_username("system:serviceaccount:ci:runner") == Subject("ServiceAccount", "runner", "ci")
    assert Subject.from_username("dra-conformance-admin") == Subject("User", "dra-conformance-admin")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "allowlist.yaml"
    path.write_text(text)
    return path


def test_the_built_in_allowlist_names_the_control_plane_and_a_file_adds_to_it(tmp_path: Path) -> None:
    built_in = read_allowlist.load(None)
    assert built_in.source == "built-in"
    for subject in (
        "Group/system:masters",
        "User/system:kube-scheduler",
        "User/system:kube-controller-manager",
        "ServiceAccount/kube-system/resource-claim-controller",
        "ServiceAccount/kube-system/generic-garbage-collector",
    ):
        assert built_in.allows(subject), f"{subject} missing from {built_in.patterns}"
    assert not built_in.allows("ServiceAccount/kube-system/ephemeral-volume-controller"), "it reads no claims"
    path = _write(tmp_path, "subjects:\n  - ServiceAccount/backup/*\n  - User/jane\n")
    allowlist = read_allowlist.load(path)
    assert allowlist.source == str(path)
    assert allowlist.allows("ServiceAccount/backup/velero") and allowlist.allows("User/jane")
    assert allowlist.allows("Group/system:masters"), "a file adds to the built-in entries unless builtIn: false"
    assert allowlist.matching("ServiceAccount/other/velero") is None
    only = read_allowlist.load(_write(tmp_path, "builtIn: false\nsubjects: [User/jane]\n"))
    assert only.patterns == ("User/jane",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- User/jane\n", "expected a mapping with subjects"),
        ("subjects: User/jane\n", "subjects must be a list"),
        ("subjects: [Robot/r2]\n", "subjects[0]: 'Robot/r2' is not User/<name>, Group/<name> or ServiceAccount/"),
        ("subjects: [ServiceAccount/only-name]\n", "subjects[0]: 'ServiceAccount/only-name' is not"),
        ("subjects: [User/a, {kind: User}]\n", "subjects[1]: {'kind': 'User'} is not"),
        ("subject: [User/a]\n", "unknown key 'subject'; known: builtIn, subjects"),
        ("builtIn: no-thanks\nsubjects: []\n", "builtIn must be true or false"),
        ("builtIn: true\n", "missing subjects"),
        ("subjects: [User/a\n", "while parsing a flow sequence"),
    ],
)
def test_a_bad_allowlist_file_is_one_line_naming_the_file_and_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(FixtureError) as raised:
        read_allowlist.load(path)
    assert str(raised.value).startswith(f"{path}: "), raised.value
    assert message in str(raised.value) and "\n" not in str(raised.value), raised.value


def _reader(subject: Subject, scope: str = "") -> Reader:
    return Reader(subject, scope, ("list",), ("ClusterRoleBinding x -> ClusterRole y",))


def test_a_reader_outside_the_allowlist_makes_the_finding_exposed_and_names_it() -> None:
    allowlist = read_allowlist.load(None).extended(["ServiceAccount/dra-system/*"])
    readers = [_reader(Subject("Group", "system:masters")), _reader(SA), _reader(SA, "team-a")]
    unconfirmed = [Candidate(Subject("User", "denied"), "", {"get"}, ["ClusterRoleBinding z -> ClusterRole y"])]
    record = finding(readers, unconfirmed, allowlist)
    assert record["state"] == "exposed"
    assert record["outside_allowlist"] == ["ServiceAccount/tools/reader"], "one subject, once, whatever its scopes"
    assert record["allowlist"] == "built-in"
    assert [row["allowed_by"] for row in record["readers"]] == ["Group/system:masters", None, None]
    assert record["unconfirmed"][0]["subject"] == "User/denied"
    clean = finding([_reader(Subject("ServiceAccount", "driver", "dra-system"))], [], allowlist)
    assert clean["state"] == "clean" and clean["outside_allowlist"] == []


def test_the_summary_carries_the_finding_or_says_it_was_not_checked(tmp_path: Path) -> None:
    facts = RunFacts("0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", ())
    assert summarize([], facts, tmp_path)["read_exposure"] == {
        "state": "not checked",
        "outside_allowlist": [],
        "allowlist": "not read (the check did not run)",
    }
    record = finding([_reader(SA)], [], read_allowlist.load(None))
    RunRecords(tmp_path, "gw0").add(RECORD_KIND, record)
    summary = summarize([], facts, tmp_path)
    assert summary["read_exposure"] == {
        "state": "exposed",
        "outside_allowlist": ["ServiceAccount/tools/reader"],
        "allowlist": "built-in",
    }
    line = (
        "- claim readers beyond their namespace: exposed, 1 outside the allowlist (built-in): "
        "ServiceAccount/tools/reader"
    )
    assert line in render_markdown(summary).splitlines()
    assert markdown_line(summary_finding([])) == "- claim readers beyond their namespace: not checked"

"""The RBAC rules walk of the read-exposure check: who the cluster's RBAC lets read claims beyond their namespace.

It only proposes candidates; the API server confirms them (`rbac.read_exposure`).

A candidate is a subject of a ClusterRoleBinding, or of a RoleBinding that reaches past the subject's own namespace,
whose role (aggregated roles included) has a rule granting get, list or watch on resourceclaims of resource.k8s.io
(wildcards included). What counts as beyond its own namespace: any grant of a ClusterRoleBinding; a RoleBinding in
another namespace than a ServiceAccount's own (or than `<ns>` for the group system:serviceaccounts:<ns>); any
RoleBinding for the groups every identity of several namespaces is in (system:serviceaccounts, system:authenticated,
system:unauthenticated). Users and other groups have no namespace: a RoleBinding is how a namespace is given to
people, and is not counted. Rules limited to named claims (`resourceNames`) are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE = "resourceclaims"
READ_VERBS = ("get", "list", "watch")
# Groups whose members come from several namespaces: a RoleBinding for them reaches past each member's own.
CROSS_NAMESPACE_GROUPS = frozenset({"system:serviceaccounts", "system:authenticated", "system:unauthenticated"})
SERVICE_ACCOUNT_GROUP_PREFIX = "system:serviceaccounts:"
SERVICE_ACCOUNT_USER_PREFIX = "system:serviceaccount:"
# The user a group's SubjectAccessReview asks for: a name no binding names, so the group alone decides.
GROUP_PROBE_USER = "dra-conformance:read-exposure:group-member"


@dataclass(frozen=True, order=True)
class Subject:
    """An RBAC subject: ServiceAccount (with its namespace), User or Group."""

    kind: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        """'ServiceAccount/ns/name', 'User/name', 'Group/name': the allowlist's and the summary's spelling."""
        return (
            f"{self.kind}/{self.namespace}/{self.name}" if self.kind == "ServiceAccount" else f"{self.kind}/{self.name}"
        )

    @property
    def home(self) -> str | None:
        """The namespace the subject belongs to, if it has one."""
        if self.kind == "ServiceAccount":
            return self.namespace
        if self.kind == "Group" and self.name.startswith(SERVICE_ACCOUNT_GROUP_PREFIX):
            return self.name.removeprefix(SERVICE_ACCOUNT_GROUP_PREFIX)
        return None

    def review_identity(self) -> dict[str, Any]:
        """The `user`/`groups` of a SubjectAccessReview asking for this subject alone."""
        if self.kind == "ServiceAccount":
            return {"user": f"{SERVICE_ACCOUNT_USER_PREFIX}{self.namespace}:{self.name}"}
        if self.kind == "User":
            return {"user": self.name}
        return {"user": GROUP_PROBE_USER, "groups": [self.name]}

    @classmethod
    def from_binding(cls, subject: Mapping[str, Any]) -> Subject | None:
        """A binding's subject entry; None for a kind RBAC does not know."""
        kind = subject.get("kind")
        if kind not in ("ServiceAccount", "User", "Group"):
            return None
        return cls(
            kind, str(subject.get("name", "")), str(subject.get("namespace") or "") if kind == "ServiceAccount" else ""
        )

    @classmethod
    def from_username(cls, username: str) -> Subject:
        """The subject an authenticated user name stands for (a ServiceAccount's `system:serviceaccount:ns:name`)."""
        if username.startswith(SERVICE_ACCOUNT_USER_PREFIX):
            namespace, _, name = username.removeprefix(SERVICE_ACCOUNT_USER_PREFIX).partition(":")
            return cls("ServiceAccount", name, namespace)
        return cls("User", username)


def reaches_beyond_home(subject: Subject, binding_namespace: str) -> bool:
    """Whether a grant in `binding_namespace` ("" for a ClusterRoleBinding) reaches past the subject's namespace."""
    if not binding_namespace:
        return True
    if subject.kind == "Group" and subject.name in CROSS_NAMESPACE_GROUPS:
        return True
    home = subject.home
    return home is not None and home != binding_namespace


def rule_read_verbs(rule: Mapping[str, Any]) -> frozenset[str]:
    """The verbs among get, list and watch that `rule` grants on every resourceclaim (wildcards included)."""
    if rule.get("resourceNames"):
        return frozenset()
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    if not ({"*", RESOURCE_GROUP} & set(groups)) or not ({"*", RESOURCE} & set(resources)):
        return frozenset()
    verbs = set(rule.get("verbs") or [])
    return frozenset(READ_VERBS) if "*" in verbs else frozenset(verbs & set(READ_VERBS))


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (empty: every role, as in the aggregation controller)."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def role_rules(role: Mapping[str, Any], cluster_roles: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A role's rules, with those of the ClusterRoles its aggregationRule selects.

    The aggregation controller copies those into the role; reading them again covers a controller that is behind.
    """
    rules = list(role.get("rules") or [])
    selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    for other in cluster_roles:
        labels = (other.get("metadata") or {}).get("labels") or {}
        if other is not role and any(_selector_matches(selector, labels) for selector in selectors):
            rules += other.get("rules") or []
    return rules


@dataclass(frozen=True)
class RbacSnapshot:
    """The cluster's RBAC objects, as the API serves them (JSON)."""

    cluster_roles: list[dict[str, Any]]
    cluster_role_bindings: list[dict[str, Any]]
    roles: list[dict[str, Any]]
    role_bindings: list[dict[str, Any]]


@dataclass
class Candidate:
    """A subject RBAC lets read claims in `scope` ("" = every namespace), the verbs, and the bindings that do it."""

    subject: Subject
    scope: str
    verbs: set[str] = field(default_factory=set)
    via: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """'all namespaces' or 'namespace <ns>'."""
        return f"namespace {self.scope}" if self.scope else "all namespaces"


def _name(document: Mapping[str, Any]) -> str:
    return str((document.get("metadata") or {}).get("name", ""))


def _namespace(document: Mapping[str, Any]) -> str:
    return str((document.get("metadata") or {}).get("namespace") or "")


def candidates(snapshot: RbacSnapshot) -> list[Candidate]:
    """Every (subject, scope) RBAC lets read claims beyond the subject's namespace, in a stable order."""
    cluster_roles = {_name(role): role for role in snapshot.cluster_roles}
    roles = {(_namespace(role), _name(role)): role for role in snapshot.roles}

    def verbs_of(ref: Mapping[str, Any], namespace: str) -> frozenset[str]:
        role = (
            cluster_roles.get(ref.get("name", ""))
            if ref.get("kind") == "ClusterRole"
            else roles.get((namespace, ref.get("name", "")))
        )
        if role is None:
            return frozenset()  # a binding to a role that does not exist grants nothing
        return frozenset().union(*(rule_read_verbs(rule) for rule in role_rules(role, snapshot.cluster_roles)))

    found: dict[tuple[Subject, str], Candidate] = {}
    bindings = [("ClusterRoleBinding", binding) for binding in snapshot.cluster_role_bindings] + [
        ("RoleBinding", binding) for binding in snapshot.role_bindings
    ]
    for kind, binding in bindings:
        namespace = _namespace(binding) if kind == "RoleBinding" else ""
        ref = binding.get("roleRef") or {}
        verbs = verbs_of(ref, namespace)
        if not verbs:
            continue
        via = f"{kind} {namespace + '/' if namespace else ''}{_name(binding)} -> {ref.get('kind')} {ref.get('name')}"
        for entry in binding.get("subjects") or []:
            subject = Subject.from_binding(entry)
            if subject is None or not reaches_beyond_home(subject, namespace):
                continue
            candidate = found.setdefault((subject, namespace), Candidate(subject, namespace))
            candidate.verbs |= verbs
            candidate.via.append(via)
    return [found[key] for key in sorted(found, key=lambda key: (str(key[0]), key[1]))]

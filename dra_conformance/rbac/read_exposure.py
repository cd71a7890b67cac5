"""Who can read ResourceClaims (and so status.devices) beyond their own namespace, and whether the allowlist says so.

The cluster's RBAC proposes candidates: every subject of a ClusterRoleBinding, or of a RoleBinding that reaches past
the subject's own namespace, whose role (aggregated roles included) has a rule granting get, list or watch on
resourceclaims of resource.k8s.io (wildcards included). The API server decides: each candidate is confirmed with a
SubjectAccessReview per verb and scope (every namespace for a ClusterRoleBinding, the binding's namespace for a
RoleBinding). A candidate the API server denies is reported as unconfirmed (an authorizer before RBAC denied it, or
RBAC's cache has not seen the binding yet), never as a reader.

What counts as beyond its own namespace: any grant of a ClusterRoleBinding; a RoleBinding in another namespace than
a ServiceAccount's own (or than `<ns>` for the group system:serviceaccounts:<ns>); any RoleBinding for the groups
every identity of several namespaces is in (system:serviceaccounts, system:authenticated, system:unauthenticated).
Users and other groups have no namespace: a RoleBinding is how a namespace is given to people, and is not counted.

Left out, on purpose: rules limited to named claims (`resourceNames`), and grants that authorizers other than RBAC
(webhooks) make, which no object in the cluster lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import ConformanceError
from dra_conformance.kube.client import raw_request
from dra_conformance.kube.namespaces import RUN_ID_LABEL
from dra_conformance.model.read_exposure import CLEAN, EXPOSED, RECORD_KIND
from dra_conformance.model.records import Section
from dra_conformance.rbac.read_allowlist import Allowlist

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE = "resourceclaims"
READ_VERBS = ("get", "list", "watch")
RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"
# Groups whose members come from several namespaces: a RoleBinding for them reaches past each member's own.
CROSS_NAMESPACE_GROUPS = frozenset({"system:serviceaccounts", "system:authenticated", "system:unauthenticated"})
SERVICE_ACCOUNT_GROUP_PREFIX = "system:serviceaccounts:"
SERVICE_ACCOUNT_USER_PREFIX = "system:serviceaccount:"
# The user a group's SubjectAccessReview asks for: a name no binding names, so the group alone decides.
GROUP_PROBE_USER = "dra-conformance:read-exposure:group-member"
REQUEST_TIMEOUT = 10.0
PAGE_SIZE = "500"
ARTIFACT = "read-exposure.json"


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


# --- the cluster -----------------------------------------------------------------------------------------------


def _list_all(api: client.ApiClient, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = [("limit", PAGE_SIZE), *([("continue", token)] if token else [])]
        status, data = raw_request(api, "GET", path, query=query, timeout=REQUEST_TIMEOUT)
        if status != 200:
            raise ConformanceError(f"list {path}: HTTP {status}: {data.decode(errors='replace')[:200]}")
        page = json.loads(data)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def read_rbac(api: client.ApiClient) -> RbacSnapshot:
    """Every ClusterRole, ClusterRoleBinding, Role and RoleBinding of the cluster."""
    return RbacSnapshot(
        cluster_roles=_list_all(api, f"{RBAC_PATH}/clusterroles"),
        cluster_role_bindings=_list_all(api, f"{RBAC_PATH}/clusterrolebindings"),
        roles=_list_all(api, f"{RBAC_PATH}/roles"),
        role_bindings=_list_all(api, f"{RBAC_PATH}/rolebindings"),
    )


def allowed(api: client.ApiClient, subject: Subject, verb: str, namespace: str) -> bool:
    """Whether the API server lets `subject` `verb` resourceclaims in `namespace` ("": all), by SubjectAccessReview."""
    attributes = {"verb": verb, "group": RESOURCE_GROUP, "resource": RESOURCE}
    if namespace:
        attributes["namespace"] = namespace
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": {**subject.review_identity(), "resourceAttributes": attributes}}, _request_timeout=REQUEST_TIMEOUT
    )
    return bool(review.status.allowed)


@dataclass(frozen=True)
class Reader:
    """A candidate as the API server confirmed it: the verbs it allowed."""

    subject: Subject
    scope: str
    verbs: tuple[str, ...]
    via: tuple[str, ...]

    @property
    def where(self) -> str:
        """'all namespaces' or 'namespace <ns>'."""
        return f"namespace {self.scope}" if self.scope else "all namespaces"


def confirm(api: client.ApiClient, found: Iterable[Candidate]) -> tuple[list[Reader], list[Candidate]]:
    """Ask the API server about each candidate's verbs: (confirmed readers, candidates it denied every verb)."""
    readers, unconfirmed = [], []
    for candidate in found:
        verbs = tuple(
            v for v in READ_VERBS if v in candidate.verbs and allowed(api, candidate.subject, v, candidate.scope)
        )
        if verbs:
            readers.append(Reader(candidate.subject, candidate.scope, verbs, tuple(candidate.via)))
        else:
            unconfirmed.append(candidate)
    return readers, unconfirmed


def run_identity(api: client.ApiClient) -> Subject:
    """Who the suite runs as (SelfSubjectReview)."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, _request_timeout=REQUEST_TIMEOUT
    )
    return Subject.from_username(str(review.status.user_info.username))


def suite_namespaces(api: client.ApiClient, namespaces: Iterable[str]) -> list[str]:
    """Those of `namespaces` that are the suite's own test namespaces (labelled with a run id), sorted."""
    own = []
    for name in sorted(set(namespaces)):
        # Raw JSON: the typed client's first namespace read costs seconds of model loading, this one milliseconds.
        status, data = raw_request(api, "GET", f"/api/v1/namespaces/{name}", timeout=REQUEST_TIMEOUT)
        if status == 404:
            continue
        if status != 200:
            raise ConformanceError(f"read namespace {name}: HTTP {status}: {data.decode(errors='replace')[:200]}")
        if RUN_ID_LABEL in ((json.loads(data).get("metadata") or {}).get("labels") or {}):
            own.append(name)
    return own


def suite_identities(api: client.ApiClient, readers: Iterable[Reader]) -> list[str]:
    """Allowlist entries for the suite's own tools.

    The identity it runs as, and ServiceAccounts in its test namespaces (the identities its checks create and delete
    while the run goes on).
    """
    readers = list(readers)
    homes = [reader.subject.home for reader in readers if reader.subject.kind == "ServiceAccount"]
    own = suite_namespaces(api, [home for home in homes if home])
    return [str(run_identity(api)), *(f"ServiceAccount/{namespace}/*" for namespace in own)]


def profile_identities(profile: DriverProfile) -> list[str]:
    """Allowlist entries for the driver under test: its kubelet plugin's and its controller's ServiceAccounts."""
    accounts = [profile.identity.service_account]
    if profile.identity.controller is not None:
        accounts.append(profile.identity.controller.service_account)
    return [f"ServiceAccount/{account.namespace}/{account.name}" for account in accounts]


def survey(api: client.ApiClient, allowlist: Allowlist, driver_identities: Iterable[str] = ()) -> dict[str, Any]:
    """The check's record (see `finding`): claim readers beyond their namespace, found, confirmed and judged.

    The allowlist is `allowlist` with `driver_identities` and the suite's own identities.
    """
    readers, unconfirmed = confirm(api, candidates(read_rbac(api)))
    extended = allowlist.extended([*driver_identities, *suite_identities(api, readers)])
    return finding(readers, unconfirmed, extended)


# --- the finding -----------------------------------------------------------------------------------------------


def finding(readers: Sequence[Reader], unconfirmed: Sequence[Candidate], allowlist: Allowlist) -> dict[str, Any]:
    """The record of one check.

    Its state, the subjects outside the allowlist, and every reader with the entry that allows it (None: a finding).
    """
    rows: list[dict[str, Any]] = []
    for reader in readers:
        entry = allowlist.matching(str(reader.subject))
        rows.append(
            {
                "subject": str(reader.subject),
                "scope": reader.where,
                "verbs": list(reader.verbs),
                "via": list(reader.via),
                "allowed_by": entry,
            }
        )
    outside = sorted({str(reader.subject) for reader, row in zip(readers, rows, strict=True) if not row["allowed_by"]})
    return {
        "state": EXPOSED if outside else CLEAN,
        "outside_allowlist": outside,
        "allowlist": allowlist.source,
        "readers": rows,
        "unconfirmed": [
            {"subject": str(c.subject), "scope": c.where, "verbs": sorted(c.verbs), "via": c.via} for c in unconfirmed
        ],
    }


def describe_outside(record: Mapping[str, Any]) -> list[str]:
    """One line per reader outside the allowlist: subject, verbs, scope and the binding."""
    return [
        f"{row['subject']} can {'/'.join(row['verbs'])} resourceclaims in {row['scope']} (via {'; '.join(row['via'])})"
        for row in record["readers"]
        if row["allowed_by"] is None
    ]


def summarize_exposure(entries: list[dict[str, Any]]) -> Section | None:
    """The run's end section: who reads claims beyond their namespace; every reader goes to read-exposure.json."""
    if not entries:
        return None
    record = entries[-1]
    outside = describe_outside(record)
    return Section(
        title="claim readers beyond their namespace",
        lines=[
            f"{len(record['readers'])} readers confirmed by SubjectAccessReview, {len(outside)} outside the allowlist "
            f"({record['allowlist']}), {len(record['unconfirmed'])} RBAC candidates the API server denied; "
            f"every reader: {ARTIFACT} in the run's reports"
        ],
        alerts=[f"  outside the allowlist: {line}" for line in outside],
        artifact=ARTIFACT,
        document=record,
    )


__all__ = [
    "RECORD_KIND",
    "Candidate",
    "RbacSnapshot",
    "Reader",
    "Subject",
    "candidates",
    "confirm",
    "finding",
    "read_rbac",
    "rule_read_verbs",
    "suite_identities",
    "summarize_exposure",
    "survey",
]

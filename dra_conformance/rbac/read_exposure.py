"""Who can read ResourceClaims (and so status.devices) beyond their own namespace, and whether the allowlist says so.

The cluster's RBAC proposes candidates (`rbac.claim_readers`); the API server decides: each candidate is confirmed
with a SubjectAccessReview per verb and scope (every namespace for a ClusterRoleBinding, the binding's namespace for
a RoleBinding). A candidate the API server denies is reported as unconfirmed (an authorizer before RBAC denied it,
or RBAC's cache has not seen the binding yet), never as a reader. Grants that authorizers other than RBAC (webhooks)
make are not found: no object in the cluster lists them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import ConformanceError
from dra_conformance.kube.client import raw_request
from dra_conformance.kube.namespaces import RUN_ID_LABEL
from dra_conformance.model.read_exposure import CLEAN, EXPOSED, RECORD_KIND
from dra_conformance.model.records import Section
from dra_conformance.rbac.claim_readers import (
    READ_VERBS,
    RESOURCE,
    RESOURCE_GROUP,
    Candidate,
    RbacSnapshot,
    Subject,
    candidates,
)
from dra_conformance.rbac.read_allowlist import Allowlist

RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"
REQUEST_TIMEOUT = 10.0
PAGE_SIZE = "500"
ARTIFACT = "read-exposure.json"


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
    "suite_identities",
    "summarize_exposure",
    "survey",
]

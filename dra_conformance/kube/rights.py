"""The API rights each bundled suite needs from the identity it runs as, as data.

The preflight asks the API server about every one of them (SelfSubjectAccessReview) before the first test, so an
identity that lacks some is refused in one line instead of failing checks for minutes and blaming the driver.
`ci-clusterrole.yaml` beside this module is the ClusterRole that grants them all: rendered from this module
(`python -m dra_conformance.kube.rights > dra_conformance/kube/ci-clusterrole.yaml`) and kept in step with it by
tests/unit/test_rights.py.

A suite's rights are what it does through the run's identity on any backend, read from the suites, the fixtures
and the engine code they call. Three kinds of calls are left out:

- what only the local backend's own powers do, since there the identity is the cluster's admin: private reference
  driver instances (their ServiceAccounts, tokens and RBAC, the deletecollection of their slices), disrupting the
  driver's processes (`disruption`), the API fault proxy, the reference metrics adapter, and patching a fake
  (kwok) node's status to stand in for a device plugin (`patch nodes/status`, rollback);
- what every authenticated user may do (discovery, /version, /readyz, SelfSubjectAccessReview,
  SelfSubjectRulesReview);
- what a check does only where the identity allows it and otherwise reports itself not applicable or without data:
  node client certificates through CertificateSigningRequests (`create`/`get`/`delete` certificatesigningrequests,
  `update` certificatesigningrequests/approval, `approve` signers kubernetes.io/kube-apiserver-client-kubelet: the
  authorization matrix's node identity on clusters whose CA the suite does not hold), and the control plane's
  leader leases (`get` leases in kube-system: the cluster health watch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CORE = ""
RESOURCE = "resource.k8s.io"
RBAC = "rbac.authorization.k8s.io"
METRICS = "metrics.k8s.io"
APIREGISTRATION = "apiregistration.k8s.io"
APPS = "apps"
BATCH = "batch"
AUTOSCALING = "autoscaling"
AUTHORIZATION = "authorization.k8s.io"

# The ClusterRole that grants every right below, shipped in the package beside this module.
CLUSTER_ROLE_MANIFEST = Path(__file__).resolve().parent / "ci-clusterrole.yaml"
CLUSTER_ROLE_NAME = "dra-conformance-ci"


@dataclass(frozen=True)
class Right:
    """One thing the suite's identity must be allowed: `verb` on `resource` (and `subresource`) of API `group`."""

    verb: str
    resource: str
    group: str = CORE
    subresource: str = ""
    namespaced: bool = True

    def __str__(self) -> str:
        """'create deviceclasses.resource.k8s.io', 'create serviceaccounts/token', 'get pods/log'."""
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {qualified}/{self.subresource}" if self.subresource else f"{self.verb} {qualified}"

    @property
    def rule_resource(self) -> str:
        """The resource as an RBAC rule names it: 'resourceclaims/status'."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def review_attributes(self) -> dict[str, str]:
        """`spec.resourceAttributes` of the SelfSubjectAccessReview that asks for this right in every namespace."""
        attributes = {"verb": self.verb, "resource": self.resource}
        if self.group:
            attributes["group"] = self.group
        if self.subresource:
            attributes["subresource"] = self.subresource
        return attributes

    def to_json(self) -> list[Any]:
        """A JSON-safe form (handed from the xdist controller to its workers)."""
        return [self.verb, self.resource, self.group, self.subresource, self.namespaced]

    @classmethod
    def from_json(cls, data: list[Any]) -> Right:
        """The inverse of `to_json`."""
        verb, resource, group, subresource, namespaced = data
        return cls(str(verb), str(resource), str(group), str(subresource), bool(namespaced))


def _rights(
    verbs: str, resource: str, group: str = CORE, *, subresource: str = "", namespaced: bool = True
) -> tuple[Right, ...]:
    return tuple(Right(verb, resource, group, subresource, namespaced) for verb in verbs.split())


# What the tracker does with each object a test creates: creates it, reads it until it is gone, deletes it.
TRACKED = "create get delete"

# What the fixtures every suite builds on do, and the run itself. A namespace per test (created, its default
# ServiceAccount awaited, deleted and read until gone); the leak audit after each test's cleanup (pods, claims and
# claim templates left in it); the existing backend's node list and, with --profile, its check that the driver is
# installed (its slices, its DeviceClasses); the controller's watch on Events for the canary gate's allocation
# timeouts (cluster-wide; the scenario runner and the kubelet checks also list a namespace's Events).
COMMON_RIGHTS: tuple[Right, ...] = (
    *_rights(TRACKED, "namespaces", namespaced=False),
    *_rights("get", "serviceaccounts"),
    *_rights("list", "nodes", namespaced=False),
    *_rights("list watch", "events"),
    *_rights("list", "pods"),
    *_rights("list", "resourceclaims", RESOURCE),
    *_rights("list", "resourceclaimtemplates", RESOURCE),
    *_rights("list", "resourceslices", RESOURCE, namespaced=False),
    *_rights("get", "deviceclasses", RESOURCE, namespaced=False),
)

# Allocation and status deploy catalog scenarios (dra_conformance/scenarios/runner.py): their DeviceClasses,
# claims, claim templates and pods; a scenario with admin access labels its namespace; the driver's slices are
# listed for the devices it publishes. For the reference driver each scenario also starts a private instance of
# it (local backend only, see the module's docstring).
_SCENARIO_RIGHTS: tuple[Right, ...] = (
    *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
    *_rights(TRACKED, "resourceclaims", RESOURCE),
    *_rights(TRACKED, "resourceclaimtemplates", RESOURCE),
    *_rights(TRACKED, "pods"),
    *_rights("patch", "namespaces", namespaced=False),
)

# The metrics rollback (the metrics suite's check and the rollback rehearsal's metrics phases,
# dra_conformance/metrics/rollback.py): v1's APIService saved, deleted and created again; then the Service behind
# each APIService is annotated so the aggregator probes it at once; both versions' NodeMetrics and PodMetrics read
# (of the sampled nodes and of a few Running pods on them, by name: metrics/samples.py SampleScope), and PodMetrics
# listed by label in the rehearsal's own namespace, as the HPA controller reads them.
_METRICS_ROLLBACK_RIGHTS: tuple[Right, ...] = (
    *_rights("get create delete", "apiservices", APIREGISTRATION, namespaced=False),
    *_rights("patch", "services"),
    *_rights("get", "nodes", METRICS, namespaced=False),
    *_rights("get list", "pods", METRICS),
)

# What each suite does itself, beyond COMMON_RIGHTS.
_OWN_RIGHTS: dict[str, tuple[Right, ...]] = {
    # Claims allocated by the real scheduler (a DeviceClass, a claim and a pod per test; another driver's class and
    # slice for the foreign-driver check); the kubelet's role annotates a pod to start its containers; the
    # driver's pools are read from its slices. Disruption, API-fault and private-driver checks: local backend only.
    "protocol": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
        *_rights("patch", "pods"),
        *_rights(TRACKED, "resourceslices", RESOURCE, namespaced=False),
        # The driver on nodes real kubelets serve, on a cluster the suite did not build: node agents read the nodes'
        # files (exec) and relay the driver's sockets (portforward: like exec, a WebSocket upgrade authorized as
        # `get` and `create`); the nodes read for their taints and architecture.
        *_rights("get create", "pods", subresource="exec"),
        *_rights("get create", "pods", subresource="portforward"),
        *_rights("get", "nodes", namespaced=False),
    ),
    # The model-based explorer (dra_conformance/explore, local backend only: a set-aside node whose driver it
    # restarts): a DeviceClass, claims of random shapes and their pods, deleted as it goes; its namespace labelled
    # for admin access where the profile declares it; the claims' status and the driver's slices listed.
    "explore": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
        *_rights("patch", "namespaces", namespaced=False),
    ),
    "allocation": _SCENARIO_RIGHTS,
    # As allocation, and the kubelet's role starts the containers of the pods it prepared (a pod annotation).
    "status": (*_SCENARIO_RIGHTS, *_rights("patch", "pods")),
    # The authorization matrix and the least-privilege audit (dra_conformance/rbac/environment.py,
    # suites/rbac/test_least_privilege.py): a driver's slices and DeviceClasses, claims allocated on two nodes;
    # identities acting as the driver (ServiceAccounts with tokens, some bound to a pod on a node), a claim
    # controller and namespace editors, each with its ClusterRole or Role and binding. The roles' own grants are
    # GRANTED_RIGHTS below. The read-exposure check (dra_conformance/rbac/read_exposure.py) lists every role and
    # binding, asks the API server about each subject they let read claims (SubjectAccessReview) and reads the
    # namespaces of the ServiceAccounts it finds (their run-id label marks the suite's own).
    "rbac": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceslices", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
        *_rights(TRACKED, "serviceaccounts"),
        *_rights("create", "serviceaccounts", subresource="token"),
        *_rights(TRACKED, "clusterroles", RBAC, namespaced=False),
        *_rights(TRACKED, "clusterrolebindings", RBAC, namespaced=False),
        *_rights(TRACKED, "roles", RBAC),
        *_rights(TRACKED, "rolebindings", RBAC),
        *_rights("list", "clusterroles", RBAC, namespaced=False),
        *_rights("list", "clusterrolebindings", RBAC, namespaced=False),
        *_rights("list", "roles", RBAC),
        *_rights("list", "rolebindings", RBAC),
        *_rights("create", "subjectaccessreviews", AUTHORIZATION, namespaced=False),
    ),
    # The Metrics API checks: both versions' node and pod metrics, each version's APIService, the rollback check
    # (_METRICS_ROLLBACK_RIGHTS). The HPA consumer check (only with a readable audit log, --dra-audit-log) creates a
    # Deployment and a HorizontalPodAutoscaler. Fault injection through the reference adapter: local backend only.
    "metrics": (
        *_METRICS_ROLLBACK_RIGHTS,
        *_rights(TRACKED, "deployments", APPS),
        *_rights(TRACKED, "horizontalpodautoscalers", AUTOSCALING),
    ),
    # Kubelet-mode checks on nodes a real kubelet serves: a DeviceClass, claims and claim templates, pods and Jobs
    # (their status and logs); the leased node read for its taints and images; on nodes the backend does not
    # describe (any but local), node agents read the node's files through exec (the client's exec is a WebSocket
    # upgrade of a GET, authorized as `get pods/exec`, and, since AuthorizePodWebsocketUpgradeCreatePermission, as
    # `create` too: kubernetes pkg/registry/core/pod/rest/subresources.go); the driver's DaemonSet pod found among all
    # pods on the node and deleted to restart it.
    "kubelet": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "resourceclaimtemplates", RESOURCE),
        *_rights(TRACKED, "pods"),
        *_rights("get", "pods", subresource="log"),
        *_rights("get create", "pods", subresource="exec"),
        *_rights(TRACKED, "jobs", BATCH),
        *_rights("get", "jobs", BATCH, subresource="status"),
        *_rights("get", "nodes", namespaced=False),
    ),
    # The extended-resource rehearsal (dra_conformance/rollback/extended_resource.py): the nodes and the driver's
    # slices to choose from; the DeviceClass that lets DRA serve the resource, created at the change and deleted
    # at the rollback; workloads (pods, their logs and claims) in a namespace of its own. The metrics rehearsal:
    # _METRICS_ROLLBACK_RIGHTS, the APIServices listed, and a consumer target pod. The driver downgrade rehearsal
    # disrupts the driver's processes: local backend only.
    "rollback": (
        *_rights("get", "nodes", namespaced=False),
        *_rights("list create delete", "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "pods"),
        *_rights("get", "pods", subresource="log"),
        *_rights("get", "resourceclaims", RESOURCE),
        *_METRICS_ROLLBACK_RIGHTS,
        *_rights("list", "apiservices", APIREGISTRATION, namespaced=False),
    ),
    # Slice hygiene: the driver's slices listed (COMMON_RIGHTS) and watched through a republish, the Nodes that own
    # node-local slices listed (COMMON_RIGHTS). The republish rests on the reference driver's fault switches: local
    # backend only.
    "slices": (*_rights("watch", "resourceslices", RESOURCE, namespaced=False),),
    # Device taints on devices no other test uses: DeviceTaintRules created, their effect changed (patch) and
    # their condition read; a DeviceClass, claims and pods to allocate, evict or keep; the target's pools read.
    "taints": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
        *_rights(TRACKED + " patch", "devicetaintrules", RESOURCE, namespaced=False),
    ),
    # Consumable capacity on one shareable device: a DeviceClass selecting it, claims for its shares and their pods;
    # the target's pools read. Private gpu-shared instances of the reference driver: local backend only.
    "capacity": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
    ),
    # Partitionable devices on a pool no other test allocates from: a DeviceClass, claims and pods that hold,
    # wait for and free partitions; the driver's slices (counter slices too) read. Private instances of the
    # reference driver: local backend only.
    "partitions": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED, "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
    ),
    # Binding conditions on devices no other test uses: a DeviceClass, a claim and a pod; the claim's changes
    # watched (the scheduler clears and allocates again within milliseconds); the target's pools read. The
    # reference driver's private instance and its controller identity: local backend only.
    "binding": (
        *_rights(TRACKED, "deviceclasses", RESOURCE, namespaced=False),
        *_rights(TRACKED + " watch", "resourceclaims", RESOURCE),
        *_rights(TRACKED, "pods"),
    ),
}

# What the roles a suite creates grant: the reference driver's ClusterRole (drivers/fake-dra-go/deploy/rbac.yaml) and
# its over-privileged variant (fixtures/rbac/overprivileged-driver.yaml), the authorization matrix's claim
# controller ClusterRole and namespace editor Role (dra_conformance/rbac/environment.py). The API server lets an
# identity create a role only if it holds every permission in it, and bind one likewise (RBAC's escalation
# prevention), unless it may `escalate` and `bind` roles: the identity needs these unless it holds
# ESCALATION_RIGHTS.
GRANTED_RIGHTS: dict[str, tuple[Right, ...]] = {
    "rbac": (
        *_rights("get list watch create update patch delete", "resourceclaims", RESOURCE),
        *_rights("get list watch create update patch delete", "resourceclaimtemplates", RESOURCE),
        *_rights("patch update", "resourceclaims", RESOURCE, subresource="status"),
        *_rights("patch update", "resourceclaims", RESOURCE, subresource="binding"),
        *_rights("associated-node:patch arbitrary-node:patch", "resourceclaims", RESOURCE, subresource="driver"),
        *_rights("get list watch create update delete", "resourceslices", RESOURCE, namespaced=False),
        # The reference driver reads its Node to name it as its slices' owner.
        *_rights("get", "nodes", namespaced=False),
    ),
}

# With these an identity may create and bind roles whatever they grant (GRANTED_RIGHTS are then not needed). The
# shipped ClusterRole does not grant them: holding the granted rights is the smaller privilege.
ESCALATION_RIGHTS: tuple[Right, ...] = (
    *_rights("escalate bind", "clusterroles", RBAC, namespaced=False),
    *_rights("escalate bind", "roles", RBAC),
)

# Every bundled suite (one directory of suites/ each) and the rights it needs besides COMMON_RIGHTS.
SUITE_RIGHTS: dict[str, tuple[Right, ...]] = {
    suite: (*own, *GRANTED_RIGHTS.get(suite, ())) for suite, own in _OWN_RIGHTS.items()
}


def _unique(rights: Iterable[Right]) -> tuple[Right, ...]:
    return tuple(dict.fromkeys(rights))


def needed_rights(
    suite_rights: Mapping[str, tuple[Right, ...]] = SUITE_RIGHTS, common: tuple[Right, ...] = COMMON_RIGHTS
) -> dict[Right, tuple[str, ...]]:
    """Every right any suite needs, in a stable order, with the suites that need it (COMMON_RIGHTS: all)."""
    suites = tuple(suite_rights)
    needed: dict[Right, list[str]] = {right: list(suites) for right in _unique(common)}
    for suite, rights in suite_rights.items():
        for right in _unique(rights):
            users = needed.setdefault(right, [])
            if suite not in users:
                users.append(suite)
    return {right: tuple(users) for right, users in needed.items()}


def escalatable_rights() -> frozenset[Right]:
    """Rights a suite needs only to grant them: an identity that may escalate and bind roles needs them not."""
    granted = {right for rights in GRANTED_RIGHTS.values() for right in rights}
    used = set(COMMON_RIGHTS) | {right for rights in _OWN_RIGHTS.values() for right in rights}
    return frozenset(granted - used)


def suites_phrase(suites: Iterable[str]) -> str:
    """'every suite' for all bundled suites, else their names in order: 'allocation, protocol'."""
    chosen = set(suites)
    return "every suite" if chosen >= set(SUITE_RIGHTS) else ", ".join(sorted(chosen))


def _verbs_by_resource(rights: Iterable[Right]) -> str:
    """Rights with the verbs of one resource joined, in their order: 'create/get/delete namespaces, list events'."""
    verbs: dict[str, list[str]] = {}
    for right in rights:
        verbs.setdefault(str(right).split(" ", 1)[1], []).append(right.verb)
    return ", ".join(f"{'/'.join(names)} {resource}" for resource, names in verbs.items())


def missing_groups(missing: Mapping[Right, tuple[str, ...]]) -> list[tuple[str, str]]:
    """Missing rights grouped by the suites that need them, in their order: ('rbac', 'create/delete a, get b')."""
    groups: dict[tuple[str, ...], list[Right]] = {}
    for right, suites in missing.items():
        groups.setdefault(tuple(sorted(suites)), []).append(right)
    return [(suites_phrase(suites), _verbs_by_resource(rights)) for suites, rights in groups.items()]


def describe_missing(missing: Mapping[Right, tuple[str, ...]]) -> str:
    """Missing rights grouped by the suites that need them, on one line: 'create/delete a, get b (rbac), ...'."""
    return ", ".join(f"{rights} ({suites})" for suites, rights in missing_groups(missing))


def skip_reasons(missing: Mapping[Right, tuple[str, ...]]) -> dict[str, str]:
    """Per suite that needs a missing right: why its checks are not applicable."""
    lacking: dict[str, list[Right]] = {}
    for right, suites in missing.items():
        for suite in suites:
            lacking.setdefault(suite, []).append(right)
    return {
        suite: "not applicable: the suite's identity cannot " + ", ".join(str(right) for right in rights)
        for suite, rights in lacking.items()
    }


def suite_of(path: Path) -> str | None:
    """The bundled suite a test file belongs to: the directory after the last `suites` in its path, if it is one."""
    parts = path.parts
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == "suites":
            return parts[index + 1] if parts[index + 1] in SUITE_RIGHTS else None
    return None


def missing_to_json(missing: Mapping[Right, tuple[str, ...]]) -> list[list[Any]]:
    """A JSON-safe form of missing rights and the suites that need them."""
    return [[right.to_json(), list(suites)] for right, suites in missing.items()]


def missing_from_json(data: list[list[Any]]) -> dict[Right, tuple[str, ...]]:
    """The inverse of `missing_to_json`."""
    return {Right.from_json(right): tuple(suites) for right, suites in data}


# Verbs in the order a rule lists them; any other verb (custom ones such as associated-node:patch) follows.
VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def _verb_key(verb: str) -> tuple[int, str]:
    return (VERB_ORDER.index(verb), "") if verb in VERB_ORDER else (len(VERB_ORDER), verb)


def cluster_role_rules(rights: Iterable[Right]) -> list[dict[str, list[str]]]:
    """RBAC rules granting exactly `rights`: one rule per API group and set of verbs."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for right in rights:
        verbs.setdefault((right.group, right.rule_resource), set()).add(right.verb)
    rules: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), granted in sorted(verbs.items()):
        rules.setdefault((group, tuple(sorted(granted, key=_verb_key))), []).append(resource)
    return [
        {"apiGroups": [group], "resources": resources, "verbs": list(granted)}
        for (group, granted), resources in rules.items()
    ]


MANIFEST_HEADER = """\
# The ClusterRole a platform team grants the identity dra-conformance runs as on a cluster it did not build:
# every right a bundled suite needs. Generated from dra_conformance/kube/rights.py, do not edit:
#   python -m dra_conformance.kube.rights > dra_conformance/kube/ci-clusterrole.yaml
# The preflight asks the API server for each right before the first test and names any that is missing.
#
#   kubectl apply -f ci-clusterrole.yaml
#   kubectl create clusterrolebinding dra-conformance-ci --clusterrole=dra-conformance-ci \\
#       --serviceaccount=<namespace>:<name>          # or --user=<name>, --group=<name>
#
# The rbac suite creates driver, controller and editor roles; the API server lets an identity create (and bind)
# only roles whose permissions it holds itself, hence the claim, status and slice rights beyond what the suites
# do themselves (an identity that may escalate and bind roles and clusterroles does not need those).
"""


def render_manifest() -> str:
    """ci-clusterrole.yaml: the ClusterRole granting COMMON_RIGHTS and every suite's rights."""
    document = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE_NAME, "labels": {"app.kubernetes.io/name": "dra-conformance"}},
        "rules": cluster_role_rules(needed_rights()),
    }
    return MANIFEST_HEADER + yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=120)


if __name__ == "__main__":
    print(render_manifest(), end="")

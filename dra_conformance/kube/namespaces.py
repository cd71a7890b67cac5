"""Test namespaces: created with the run's label and a usable default ServiceAccount, deleted in bulk."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits

RUN_ID_LABEL = "dra-conformance.io/run-id"
# The condition the namespace controller sets while discovery of some API group versions fails: it deletes what it
# can and keeps the namespace until discovery succeeds (a failing aggregated API blocks every namespace deletion).
DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"
# Its message names each failing group version, "...server APIs: metrics.k8s.io/v1: <error>, metrics.k8s.io/v1beta1:
# <error>" (client-go's ErrGroupDiscoveryFailed): a group version opening the list or following ", ", then ": ".
_FAILING_GROUP_VERSION = re.compile(r"(?:APIs: |, )([a-z0-9][a-z0-9.-]*\.[a-z0-9.-]+)/(v[0-9]+[a-z0-9]*): ")


class NamespaceDeletionBlocked(UserWarning):
    """Test namespaces left Terminating at the deadline because discovery of an aggregated API fails (one line)."""


def failing_apiservices(message: str) -> list[str]:
    """The APIServices (<version>.<group>) a NamespaceDeletionDiscoveryFailure message names, in order, once each."""
    found = [f"{version}.{group}" for group, version in _FAILING_GROUP_VERSION.findall(message)]
    return list(dict.fromkeys(found))


def discovery_blocked(namespace: Any) -> str | None:
    """The message of a namespace's True NamespaceDeletionDiscoveryFailure condition, or None."""
    conditions = (namespace.status.conditions if namespace.status else None) or []
    found = next((c for c in conditions if c.type == DISCOVERY_FAILURE and c.status == "True"), None)
    return str(found.message or "") if found is not None else None


def blocked_line(namespaces: Iterable[str], messages: Iterable[str], conditions: dict[str, str], waited: float) -> str:
    """One line: which test namespaces failing discovery keeps, the APIServices that fail it, and what follows."""
    names = sorted(namespaces)
    services = list(dict.fromkeys(s for message in messages for s in failing_apiservices(message)))
    named = ", ".join(f"{s} ({conditions[s]})" if s in conditions else s for s in services) or "unnamed"
    return (
        f"dra-conformance: {len(names)} test namespace(s) still Terminating after {waited:g} s ({', '.join(names)}): "
        f"{DISCOVERY_FAILURE}, deletion blocked by failing aggregated discovery of APIService(s) {named}; the "
        "namespace controller finishes once they serve again (a cluster condition, not the driver's; not awaited)"
    )


def create_namespace(admin: client.ApiClient, name: str, run_id: str, timeout: float) -> None:
    """Create a namespace labelled with the run id and wait for its default ServiceAccount.

    Pod admission rejects pods until the serviceaccount controller has made "default".
    """
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": name, "labels": {RUN_ID_LABEL: run_id}}})
    waits.until(
        functools.partial(core.read_namespaced_service_account, "default", name),
        bool,
        timeout=timeout,
        what=f"ServiceAccount default in namespace {name}",
        retry_on=(ApiException,),
    )


class NamespaceReaper:
    """Deletes test namespaces and, once per worker session, waits until all of them are gone.

    The namespace controller waits a fixed 5 s after a deletion before it starts (namespaceDeletionGracePeriod),
    so awaiting each namespace in its own test's teardown would add 5 s to every test. The objects a test
    created are awaited per test by the tracker; the emptied namespaces are awaited together here.

    Where the cluster is discarded when the run ends (`discarded_with_cluster`), deletions are held back: emptying
    each namespace makes the namespace controller list and delete-collection every namespaced resource type in it
    (in the default run, 42% of the API server's requests, for namespaces nobody will see again). `settle` at the
    session's end deletes the held ones after all if the cluster turns out to stay (another run attached to it).
    """

    def __init__(self, core: client.CoreV1Api, timeout: float, *, discarded_with_cluster: bool = False) -> None:
        """Delete through `core`; allow `timeout` seconds for the last namespace to disappear."""
        self.core = core
        self.timeout = timeout
        self.discarded_with_cluster = discarded_with_cluster
        self.pending: list[str] = []
        self.held: list[str] = []

    def delete(self, name: str) -> None:
        """Request deletion of a namespace (or hold it back, see the class); it is awaited in `wait_all`."""
        if self.discarded_with_cluster:
            self.held.append(name)
            return
        self._delete(name)

    def _delete(self, name: str) -> None:
        try:
            self.core.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise
        self.pending.append(name)

    def settle(self, cluster_discarded: bool) -> None:
        """At the session's end: nothing more where the cluster is discarded now; else delete and await them all."""
        if cluster_discarded:
            return
        held, self.held = self.held, []
        for name in held:
            self._delete(name)
        self.wait_all()

    def _left(self) -> dict[str, Any]:
        left = {}
        for name in self.pending:
            try:
                left[name] = self.core.read_namespace(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        return left

    def _remaining(self) -> dict[str, str]:
        remaining = {}
        for name, namespace in self._left().items():
            conditions = [f"{c.type}: {c.message}" for c in (namespace.status.conditions or []) if c.status == "True"]
            remaining[name] = f"{namespace.status.phase} {conditions}"
        return remaining

    def _apiservice_conditions(self) -> dict[str, str]:
        """Each APIService's Available condition ("False/FailedDiscoveryCheck"); empty if they cannot be read."""
        try:
            services = client.ApiregistrationV1Api(self.core.api_client).list_api_service().items
        except ApiException:
            return {}
        found = {}
        for service in services:
            conditions = (service.status.conditions if service.status else None) or []
            available = next((c for c in conditions if c.type == "Available"), None)
            if available is not None:
                found[service.metadata.name] = f"{available.status}/{available.reason}"
        return found

    def wait_all(self) -> None:
        """Wait until every deleted namespace is gone, up to the deadline; the timeout names the ones left and why.

        Namespaces whose deletion failing aggregated discovery blocks (NamespaceDeletionDiscoveryFailure) are not
        the run's to wait for past the deadline: when only such are left, one line (a `NamespaceDeletionBlocked`
        warning) names them and the APIServices that fail, and the run goes on.
        """
        try:
            waits.until(
                self._remaining,
                lambda remaining: not remaining,
                timeout=self.timeout,
                what=f"{len(self.pending)} test namespaces deleted",
                describe=str,
            )
        except WaitTimeout:
            left = self._left()
            if not left:
                return  # gone right at the deadline
            blocked = {name: discovery_blocked(namespace) for name, namespace in left.items()}
            if any(message is None for message in blocked.values()):
                raise
            messages = [message for message in blocked.values() if message]
            line = blocked_line(blocked, messages, self._apiservice_conditions(), self.timeout)
            warnings.warn(NamespaceDeletionBlocked(line), stacklevel=2)

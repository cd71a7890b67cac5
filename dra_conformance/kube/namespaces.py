"""Test namespaces: created with the run's label and a usable default ServiceAccount, deleted in bulk."""

from __future__ import annotations

import functools

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube import waits

RUN_ID_LABEL = "dra-conformance.io/run-id"


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
    """

    def __init__(self, core: client.CoreV1Api, timeout: float) -> None:
        """Delete through `core`; allow `timeout` seconds for the last namespace to disappear."""
        self.core = core
        self.timeout = timeout
        self.pending: list[str] = []

    def delete(self, name: str) -> None:
        """Request deletion of a namespace; it is awaited in `wait_all`."""
        try:
            self.core.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise
        self.pending.append(name)

    def _remaining(self) -> dict[str, str]:
        remaining = {}
        for name in self.pending:
            try:
                namespace = self.core.read_namespace(name)
            except ApiException as error:
                if error.status == 404:
                    continue
                raise
            conditions = [f"{c.type}: {c.message}" for c in (namespace.status.conditions or []) if c.status == "True"]
            remaining[name] = f"{namespace.status.phase} {conditions}"
        return remaining

    def wait_all(self) -> None:
        """Wait until every deleted namespace is gone; the timeout names the ones left and why."""
        waits.until(
            self._remaining,
            lambda remaining: not remaining,
            timeout=self.timeout,
            what=f"{len(self.pending)} test namespaces deleted",
            describe=str,
        )

"""Preflight: is a cluster usable by the suites at all? Checked once per run, before the first test.

Each check names what failed in one line: unreachable, not authenticated, no `/version`, `resource.k8s.io` not
served, or an identity that may not create namespaces (every test runs in a namespace of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError

from dra_conformance.errors import BackendError
from dra_conformance.kube import discovery
from dra_conformance.kube.client import client_from_kubeconfig, status_message

# (connect, read) seconds per request. A reachable API server answers each of these in milliseconds; the connect
# limit bounds a black-holed address, and with no retries the whole preflight stays well under 15 s.
REQUEST_TIMEOUT = (4.0, 8.0)
RESOURCE_GROUP = "resource.k8s.io"
T = TypeVar("T")


class PreflightError(BackendError):
    """The cluster cannot run the suites; the message names the cluster and the cause."""


@dataclass(frozen=True)
class PreflightResult:
    """What the preflight learned about a usable cluster."""

    server: str
    version: str
    user: str
    resource_versions: list[str]


def _cause(error: Exception) -> str:
    if isinstance(error, ApiException):
        if error.status == 401:
            return "credentials rejected (401 Unauthorized): the token or client certificate is invalid or expired"
        return f"{error.status} {error.reason}: {status_message(error)}"
    cause: BaseException = error.reason if isinstance(error, MaxRetryError) and error.reason is not None else error
    return " ".join(f"{type(cause).__name__}: {cause}".split())


def check_cluster(kubeconfig: Path, context: str | None = None) -> PreflightResult:
    """Check the cluster `kubeconfig` (and `context`) names; raise PreflightError at the first failed check."""
    with client_from_kubeconfig(kubeconfig, context, retries=0) as api:
        server = str(api.configuration.host)

        def fail(step: str, cause: str) -> PreflightError:
            return PreflightError(f"cluster {server} (kubeconfig {kubeconfig}) is not usable: {step}: {cause}")

        def ask(step: str, call: Callable[[], T]) -> T:
            try:
                return call()
            except ApiException as error:
                raise fail("not authenticated" if error.status == 401 else step, _cause(error)) from None
            except (HTTPError, OSError) as error:
                raise fail("unreachable", _cause(error)) from None

        version = ask("GET /version", lambda: client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT))
        review = ask(
            "who am I (SelfSubjectReview)",
            lambda: client.AuthenticationV1Api(api).create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        user = str(review.status.user_info.username)
        if user == "system:anonymous":
            raise fail("not authenticated", "the server sees system:anonymous: the kubeconfig has no credentials")
        served = ask(
            f"discovery of {RESOURCE_GROUP}",
            lambda: discovery.served_versions(api, RESOURCE_GROUP, timeout=REQUEST_TIMEOUT[1]),
        )
        if not served:
            raise fail(RESOURCE_GROUP, "not served (DRA is off, or the API server predates it)")
        access = ask(
            "may I create namespaces (SelfSubjectAccessReview)",
            lambda: client.AuthorizationV1Api(api).create_self_subject_access_review(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {"verb": "create", "resource": "namespaces"}},
                },
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        if not access.status.allowed:
            why = access.status.reason or access.status.evaluation_error or "no RBAC rule allows it"
            raise fail("forbidden", f"{user} may not create namespaces, and every test runs in its own ({why})")
        return PreflightResult(server, str(version.git_version), user, served)

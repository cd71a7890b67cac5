"""Preflight: is a cluster usable by the suites at all? Checked once per run, before the first test.

Each check names what failed in one line: unreachable, a server certificate the kubeconfig's CA does not trust, not
authenticated, no `/version`, or `resource.k8s.io` not served. Then `check_rights` asks, one
SelfSubjectAccessReview per right and several at once, whether the identity holds every right the bundled suites
need (`kube.rights`), and names every one it lacks at once: the caller refuses the run, or skips the suites that
need what is missing. A right every suite needs (a namespace per test, the nodes) is fatal either way.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError

from dra_conformance.errors import BackendError
from dra_conformance.kube import discovery
from dra_conformance.kube.client import client_from_kubeconfig, status_message
from dra_conformance.kube.rights import (
    CLUSTER_ROLE_MANIFEST,
    ESCALATION_RIGHTS,
    SUITE_RIGHTS,
    Right,
    describe_missing,
    escalatable_rights,
    missing_groups,
    needed_rights,
)

# (connect, read) seconds per request. A reachable API server answers each of these in milliseconds; the connect
# limit bounds a black-holed address, and with no retries the whole preflight stays well under 15 s.
REQUEST_TIMEOUT = (4.0, 8.0)
RESOURCE_GROUP = "resource.k8s.io"
# SelfSubjectAccessReviews in flight at once (at most the client's connection pool, so no connection is dropped).
CONCURRENT_REVIEWS = 8
# The kube-apiserver authorizes this group before any configured authorizer, for every request
# (k8s.io/kubernetes@v1.37.2 pkg/kubeapiserver/authorizer/reload.go:110, "Add SystemPrivilegedGroup as an
# authorizing group"): an identity in it holds every right, and asking for each one would only cost time.
PRIVILEGED_GROUP = "system:masters"
# OpenSSL's verify results (X509_V_ERR_*) that mean no CA the client trusts signed the server's certificate chain:
# unable to get issuer certificate (2), certificate signature failure (7), self-signed certificate (18),
# self-signed certificate in chain (19), unable to get local issuer certificate (20), unable to verify the first
# certificate (21). Others (expired, hostname mismatch) are the certificate's own fault, named as OpenSSL says.
UNTRUSTED_CHAIN = frozenset({2, 7, 18, 19, 20, 21})
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


def _unusable(server: str, kubeconfig: Path, what: str) -> PreflightError:
    return PreflightError(f"cluster {server} (kubeconfig {kubeconfig}) is not usable: {what}")


def certificate_error(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The TLS verification failure behind a request's error (urllib3 wraps it in SSLError, MaxRetryError), if any."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        pending.extend([*current.args, getattr(current, "reason", None), current.__cause__, current.__context__])
    return None


def certificate_cause(error: ssl.SSLCertVerificationError, *, has_ca: bool) -> str:
    """What a TLS verification failure means to someone holding the kubeconfig: which CA did not trust what."""
    what = error.verify_message or str(error.reason or error)
    if error.verify_code not in UNTRUSTED_CHAIN:
        return f"server certificate rejected: {what}"
    if not has_ca:
        no_ca = "the kubeconfig names no certificate-authority and no system CA signed it"
        return f"certificate not trusted: {no_ca} ({what})"
    return (
        f"certificate not trusted by the kubeconfig's CA: its certificate-authority did not sign the server's ({what})"
    )


def _asker(api: client.ApiClient, kubeconfig: Path) -> Callable[[str, Callable[[], T]], T]:
    """`ask(step, call)`: the call's answer, or a PreflightError naming the step (or unreachable, untrusted, ...)."""
    server = str(api.configuration.host)
    has_ca = bool(api.configuration.ssl_ca_cert)

    def ask(step: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except ApiException as error:
            step = "not authenticated" if error.status == 401 else step
            raise _unusable(server, kubeconfig, f"{step}: {_cause(error)}") from None
        except (HTTPError, OSError) as error:
            untrusted = certificate_error(error)
            if untrusted is not None:
                raise _unusable(server, kubeconfig, certificate_cause(untrusted, has_ca=has_ca)) from None
            raise _unusable(server, kubeconfig, f"unreachable: {_cause(error)}") from None

    return ask


def _who_am_i(api: client.ApiClient, ask: Callable[[str, Callable[[], T]], T]) -> tuple[str, list[str]]:
    """The identity's user name and groups, as the API server authenticated them."""
    review: Any = ask(
        "who am I (SelfSubjectReview)",
        lambda: client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            _request_timeout=REQUEST_TIMEOUT,
        ),
    )
    info = review.status.user_info
    return str(info.username), [str(group) for group in info.groups or []]


def _access_review(api: client.ApiClient, attributes: dict[str, str]) -> Any:
    return client.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
        _request_timeout=REQUEST_TIMEOUT,
    )


def check_cluster(kubeconfig: Path, context: str | None = None) -> PreflightResult:
    """Check the cluster `kubeconfig` (and `context`) names; raise PreflightError at the first failed check.

    What the identity may do is `check_rights`'s to say, every missing right at once.
    """
    with client_from_kubeconfig(kubeconfig, context, retries=0) as api:
        server = str(api.configuration.host)

        def fail(step: str, cause: str) -> PreflightError:
            return _unusable(server, kubeconfig, f"{step}: {cause}")

        ask = _asker(api, kubeconfig)
        version = ask("GET /version", lambda: client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT))
        user, _groups = _who_am_i(api, ask)
        if user == "system:anonymous":
            raise fail("not authenticated", "the server sees system:anonymous: the kubeconfig has no credentials")
        served = ask(
            f"discovery of {RESOURCE_GROUP}",
            lambda: discovery.served_versions(api, RESOURCE_GROUP, timeout=REQUEST_TIMEOUT[1]),
        )
        if not served:
            raise fail(RESOURCE_GROUP, "not served (DRA is off, or the API server predates it)")
        return PreflightResult(server, str(version.git_version), user, served)


@dataclass(frozen=True)
class RightsCheck:
    """Which of the rights the suites need the identity lacks, with the suites that need each one."""

    server: str
    kubeconfig: Path
    user: str
    missing: dict[Right, tuple[str, ...]] = field(default_factory=dict)

    @property
    def fatal(self) -> dict[Right, tuple[str, ...]]:
        """The missing rights every suite needs (a namespace per test, the nodes): no suite could run without them."""
        return {right: suites for right, suites in self.missing.items() if set(suites) >= set(SUITE_RIGHTS)}

    def refusal(self) -> PreflightError:
        """The message that refuses the run: every missing right, for which suites, and the ways on.

        One line where the missing rights are needed by the same suites; else one line and an indented line per
        group of suites (an identity lacking most rights would otherwise be one line of thousands of characters).
        """
        way_on = (
            "(--allow-partial cannot help: no suite runs without the rights every suite needs)"
            if self.fatal
            else "or pass --allow-partial (pytest: --dra-allow-partial) to skip the checks that need them"
        )
        grant = f"grant the ClusterRole in {CLUSTER_ROLE_MANIFEST} {way_on}"
        groups = missing_groups(self.missing)
        if len(groups) <= 1:
            lacks = f"the suite's identity {self.user} lacks: {describe_missing(self.missing)}; {grant}"
        else:
            listed = "".join(f"\n  for {suites}: {rights}" for suites, rights in groups)
            lacks = f"the suite's identity {self.user} lacks {len(self.missing)} rights; {grant}:{listed}"
        return _unusable(self.server, self.kubeconfig, lacks)


def check_rights(
    kubeconfig: Path, context: str | None = None, needed: Mapping[Right, tuple[str, ...]] | None = None
) -> RightsCheck:
    """Ask the API server whether the identity holds each right in `needed` (default: every suite's).

    Rights a suite needs only to grant them to the roles it creates are not missing where the identity may
    escalate and bind roles instead. An identity in the privileged group holds them all, unasked. Raises
    PreflightError when the server cannot be asked.
    """
    wanted = dict(needed_rights() if needed is None else needed)
    with client_from_kubeconfig(kubeconfig, context, retries=0) as api:
        server = str(api.configuration.host)
        ask = _asker(api, kubeconfig)
        user, groups = _who_am_i(api, ask)
        if PRIVILEGED_GROUP in groups:
            return RightsCheck(server, kubeconfig, user)
        asked = list(dict.fromkeys([*wanted, *ESCALATION_RIGHTS]))

        def allowed(right: Right) -> bool:
            review = ask(
                f"may I {right} (SelfSubjectAccessReview)", lambda: _access_review(api, right.review_attributes())
            )
            return bool(review.status.allowed)

        workers = max(1, min(CONCURRENT_REVIEWS, int(api.configuration.connection_pool_maxsize or 1)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preflight-rights") as pool:
            try:
                answers = dict(zip(asked, pool.map(allowed, asked), strict=True))
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the first failure is the answer: ask no more
                raise
    may_escalate = all(answers[right] for right in ESCALATION_RIGHTS)
    excused = escalatable_rights() if may_escalate else frozenset()
    missing = {right: suites for right, suites in wanted.items() if not answers[right] and right not in excused}
    return RightsCheck(server, kubeconfig, user, missing)

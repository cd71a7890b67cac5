"""API clients acting as specific identities: anonymous, or a ServiceAccount token from the TokenRequest API."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dra_conformance.kube.builders import PAUSE_IMAGE, TEST_POD_GRACE_SECONDS
from dra_conformance.kube.client import server_configuration

# Tokens only need to outlive one test; the API server's minimum is 10 minutes.
TOKEN_LIFETIME_SECONDS = 600


def anonymous_client(admin: client.ApiClient) -> client.ApiClient:
    """A client for the same API server that presents no credentials at all."""
    return client.ApiClient(server_configuration(admin))


def request_token(
    admin: client.ApiClient,
    namespace: str,
    service_account: str,
    *,
    bound_pod: tuple[str, str] | None = None,
    lifetime: int = TOKEN_LIFETIME_SECONDS,
) -> str:
    """Mint a token for a ServiceAccount; binding it to (pod name, pod uid) adds the pod's node-name claim."""
    spec: dict[str, object] = {"audiences": [], "expirationSeconds": lifetime}
    if bound_pod is not None:
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": bound_pod[0],
            "uid": bound_pod[1],
        }
    review = client.CoreV1Api(admin).create_namespaced_service_account_token(service_account, namespace, {"spec": spec})
    return str(review.status.token)


def token_holder_pod(namespace: str, service_account: str, node: str, name: str) -> dict[str, Any]:
    """A pod bound to `node` (no scheduler involved) that a ServiceAccount token can be bound to.

    A token bound to it carries `node` as its node-name claim, the way a DaemonSet pod's token does, and stops
    working when the pod is deleted: the pod must live as long as the token's user.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "fake-dra"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": service_account,
            "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
            "containers": [{"name": "driver", "image": PAUSE_IMAGE}],
        },
    }


def token_client(admin: client.ApiClient, token: str) -> client.ApiClient:
    """A client for the same API server that authenticates with a bearer token."""
    configuration = server_configuration(admin)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)

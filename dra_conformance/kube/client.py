"""Constructing clients of the official `kubernetes` package from kubeconfig files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from dra_conformance.errors import UsageError


def client_from_kubeconfig(
    path: Path, context: str | None = None, *, retries: int | None = None, connections: int | None = None
) -> client.ApiClient:
    """Return an ApiClient for `path` (and `context`); a missing or malformed kubeconfig is a usage error.

    `retries` limits urllib3's retries of failed connections (default: urllib3's own, 3); `connections` sizes its
    connection pool (default: the client's own), one per caller that runs at the same time.
    """
    if not path.is_file():
        raise UsageError(f"kubeconfig {path}: no such file")
    try:
        _check_context(path, context)
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(path), context=context, client_configuration=configuration, persist_config=False
        )
        configuration.retries = retries
        if connections is not None:
            configuration.connection_pool_maxsize = connections
        return client.ApiClient(configuration)
    except UsageError:
        raise
    except ConfigException as error:
        raise UsageError(f"kubeconfig {path}: {_one_line(str(error))}") from None
    except Exception as error:  # the loader raises bare YAML/KeyError/TypeError on malformed files
        reason = _one_line(f"{type(error).__name__}: {error}")
        raise UsageError(f"kubeconfig {path}: not a valid kubeconfig ({reason})") from None


def _check_context(path: Path, context: str | None) -> None:
    """A context the kubeconfig does not hold is one line naming those it holds (the loader names neither)."""
    if context is None:
        return
    contexts, current = config.list_kube_config_contexts(config_file=str(path))
    names = [str(entry.get("name")) for entry in contexts or [] if isinstance(entry, dict)]
    if context not in names:
        current_name = f" (current: {current.get('name')})" if isinstance(current, dict) else ""
        raise UsageError(
            f"kubeconfig {path}: no context {context!r}; it has {', '.join(map(repr, names)) or 'none'}{current_name}"
        )


# Where the kubelet mounts a pod's ServiceAccount token, the cluster's CA and the pod's namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_kubeconfig(
    environ: Mapping[str, str], target: Path, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Path | None:
    """In a pod (KUBERNETES_SERVICE_HOST set, a token mounted), write a kubeconfig of its ServiceAccount; else None.

    The kubeconfig names the mounted files rather than copying them (the token rotates; `tokenFile` is read when a
    client is made), so it holds no secret, and every part of the engine that takes a kubeconfig works unchanged.
    """
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not (account_dir / "token").is_file():
        return None
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace_file = account_dir / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else "default"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "in-cluster", "cluster": {"server": server, "certificate-authority": str(account_dir / "ca.crt")}}
        ],
        "users": [{"name": "service-account", "user": {"tokenFile": str(account_dir / "token")}}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {"cluster": "in-cluster", "user": "service-account", "namespace": namespace},
            }
        ],
        "current-context": "in-cluster",
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def server_configuration(admin: client.ApiClient) -> client.Configuration:
    """A configuration for `admin`'s API server, trusting the same CA, with no credentials yet."""
    source = admin.configuration
    configuration = client.Configuration()
    configuration.host = source.host
    configuration.ssl_ca_cert = source.ssl_ca_cert
    configuration.verify_ssl = source.verify_ssl
    return configuration


def sibling_client(api: client.ApiClient) -> client.ApiClient:
    """Another ApiClient on `api`'s configuration: the same server and credentials, its own pool and headers."""
    return client.ApiClient(configuration=api.configuration)


def _one_line(text: str) -> str:
    # YAML parser errors span several lines; a usage error is one.
    return " ".join(text.split())


def status_message(error: ApiException) -> str:
    """The `message` of the API server's Status body (the denial text), or the raw body if it is not JSON."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return str(error.body or error.reason)
    return str(body.get("message", error.body)) if isinstance(body, dict) else str(body)


def raw_request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    timeout: float | tuple[float, float],
    query: list[tuple[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> tuple[int, bytes]:
    """One REST call outside the typed client (a raw path, a custom Accept, dry-run): (status, body bytes).

    Any HTTP status is returned, not raised; a connection failure raises as urllib3 does.
    """
    serialized = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params={"Accept": "application/json", **(headers or {})},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized[:4], post_params=serialized[4], _request_timeout=timeout)
    response.read()
    return int(response.status), bytes(response.data or b"")

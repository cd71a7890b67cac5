"""The reference metrics adapter of a local cluster, registered through the real aggregation layer.

One APIService per version (v1beta1.metrics.k8s.io, v1.metrics.k8s.io) points at an ExternalName Service for
localhost; the adapter serves TLS with a certificate from its own CA (the APIServices' caBundle) for the
Service's DNS name, and accepts only the kube-apiserver's front-proxy client certificate.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.backends.local.control_plane import FRONT_PROXY_CLIENT, LOOPBACK, ProcessSpec
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.pki import CertificateAuthority

NAMESPACE = "fake-metrics"
SERVICE = "fake-metrics"
GROUP = "metrics.k8s.io"
VERSIONS = ("v1beta1", "v1")


def apiservice(version: str, port: int, ca_bundle: bytes) -> dict[str, Any]:
    """The APIService of one metrics.k8s.io version, routed to the adapter."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{version}.{GROUP}", "labels": {"app.kubernetes.io/name": "fake-metrics"}},
        "spec": {
            "group": GROUP,
            "version": version,
            "service": {"namespace": NAMESPACE, "name": SERVICE, "port": port},
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100 if version == "v1" else 90,
        },
    }


def process(layout: ClusterLayout, port: int, control_socket: Path) -> tuple[ProcessSpec, bytes]:
    """Certificates and the process of the adapter; returns the spec and the CA bundle for the APIServices."""
    ca = CertificateAuthority.create("fake-metrics-ca")
    cert, key = ca.issue(
        SERVICE,
        dns_names=[f"{SERVICE}.{NAMESPACE}.svc", "localhost"],
        ip_addresses=[LOOPBACK],
        server=True,
        client=False,
    ).write(layout.pki, "fake-metrics")
    argv = [
        sys.executable,
        "-m",
        "fake_metrics",
        f"--bind-address={LOOPBACK}",
        f"--port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--requestheader-client-ca-file={layout.pki / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--control-socket={control_socket}",
    ]
    return ProcessSpec("fake-metrics", argv, str(layout.component_log("fake-metrics")), critical=False), ca.cert_pem


def register(api_client: client.ApiClient, port: int, ca_bundle: bytes, versions: tuple[str, ...] = VERSIONS) -> None:
    """Create the namespace, the ExternalName Service and one APIService per version (existing ones are kept)."""
    core = client.CoreV1Api(api_client)
    registration = client.ApiregistrationV1Api(api_client)
    service = {
        "metadata": {"name": SERVICE},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
    }
    _create_or_keep(core.create_namespace, {"metadata": {"name": NAMESPACE}})
    _create_or_keep(core.create_namespaced_service, NAMESPACE, service)
    for version in versions:
        _create_or_keep(registration.create_api_service, apiservice(version, port, ca_bundle))


def _create_or_keep(create: Any, *args: Any) -> None:
    try:
        create(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def available(api_client: client.ApiClient) -> dict[str, str]:
    """`Available` condition of each metrics APIService: name -> "True/Passed" etc."""
    result = {}
    for version in VERSIONS:
        name = f"{version}.{GROUP}"
        try:
            service = client.ApiregistrationV1Api(api_client).read_api_service(name)
        except ApiException as error:
            if error.status == 404:
                result[name] = "missing"
                continue
            raise
        condition = (
            next((c for c in service.status.conditions or [] if c.type == "Available"), None)
            if service.status
            else None
        )
        result[name] = f"{condition.status}/{condition.reason}" if condition else "unknown"
    return result

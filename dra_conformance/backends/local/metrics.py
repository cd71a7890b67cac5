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

from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.network import FRONT_PROXY_CLIENT, LOOPBACK
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.kube.pki import CertificateAuthority

NAMESPACE = "fake-metrics"
SERVICE = "fake-metrics"
# The real metrics-server serves v1beta1 only (v1 serving is an open upstream change in v0.9.0).
METRICS_SERVER_VERSIONS = ("v1beta1",)
# metrics-server scrapes the (emulated) kubelets this often; the suites' freshness checks expect 3x this at most.
METRICS_SERVER_RESOLUTION = "15s"
GROUP = "metrics.k8s.io"
VERSIONS = ("v1beta1", "v1")


def apiservice(
    version: str, port: int, ca_bundle: bytes, namespace: str = NAMESPACE, service: str = SERVICE
) -> dict[str, Any]:
    """The APIService of one metrics.k8s.io version, routed to the adapter."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{version}.{GROUP}", "labels": {"app.kubernetes.io/name": service}},
        "spec": {
            "group": GROUP,
            "version": version,
            "service": {"namespace": namespace, "name": service, "port": port},
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100 if version == "v1" else 90,
        },
    }


# The reference adapter's name among the supervisor's processes (its log, its pid).
PROCESS_NAME = "fake-metrics"


def _serving_cert(layout: ClusterLayout, namespace: str, service: str) -> tuple[Path, Path, bytes]:
    ca = CertificateAuthority.create(f"{service}-ca")
    cert, key = ca.issue(
        service,
        dns_names=[f"{service}.{namespace}.svc", "localhost"],
        ip_addresses=[LOOPBACK],
        server=True,
        client=False,
    ).write(layout.pki, service)
    return cert, key, ca.cert_pem


def process(layout: ClusterLayout, port: int, control_socket: Path) -> tuple[ProcessSpec, bytes]:
    """The reference adapter's process and certificates; returns the spec and the CA bundle for the APIServices."""
    cert, key, ca_bundle = _serving_cert(layout, NAMESPACE, SERVICE)
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
    return ProcessSpec(PROCESS_NAME, argv, str(layout.component_log(PROCESS_NAME)), critical=False), ca_bundle


def metrics_server_process(layout: ClusterLayout, binary: Path, port: int) -> tuple[ProcessSpec, bytes]:
    """The real metrics-server, scraping kwok's emulated kubelet resource metrics on loopback."""
    cert, key, ca_bundle = _serving_cert(layout, "metrics-server", "metrics-server")
    kubeconfig = layout.kubeconfig
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        # kwok's kubelet listener uses a self-signed certificate; nodes advertise it as ExternalDNS localhost.
        "--kubelet-insecure-tls",
        "--kubelet-preferred-address-types=ExternalDNS",
        "--kubelet-use-node-status-port",
        f"--metric-resolution={METRICS_SERVER_RESOLUTION}",
    ]
    return ProcessSpec("metrics-server", argv, str(layout.component_log("metrics-server")), critical=False), ca_bundle


def register(
    api_client: client.ApiClient,
    port: int,
    ca_bundle: bytes,
    versions: tuple[str, ...] = VERSIONS,
    namespace: str = NAMESPACE,
    service_name: str = SERVICE,
) -> None:
    """Create the namespace, the ExternalName Service and one APIService per version (existing ones are kept)."""
    core = client.CoreV1Api(api_client)
    registration = client.ApiregistrationV1Api(api_client)
    service = {
        "metadata": {"name": service_name},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
    }
    _create_or_keep(core.create_namespace, {"metadata": {"name": namespace}})
    _create_or_keep(core.create_namespaced_service, namespace, service)
    for version in versions:
        _create_or_keep(registration.create_api_service, apiservice(version, port, ca_bundle, namespace, service_name))


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

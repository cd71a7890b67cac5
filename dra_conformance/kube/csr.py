"""Node client certificates from the cluster's own signer, for clusters whose CA key the suite does not hold.

The admin identity asks for a `system:node:<node>` certificate with a CertificateSigningRequest, approves it
through the approval subresource, and waits for the signer to write `status.certificate`, the way a kubelet
bootstraps its credentials. The request is deleted again when the caller is done (or when any step fails).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import ConformanceError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.client import server_configuration, status_message
from dra_conformance.kube.pki import IssuedCert, key_pem, new_key, subject_name

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# That signer accepts exactly these usages, or these plus "key encipherment", which an ECDSA key cannot do.
NODE_CLIENT_USAGES = ("digital signature", "client auth")
NODES_GROUP = "system:nodes"
MANAGED_BY_LABELS = {"app.kubernetes.io/managed-by": "dra-conformance"}
# Longer than a full run of the suites on 2 cores (tens of minutes), short enough that a certificate left on disk
# soon stops working. The signer may shorten it (--cluster-signing-duration); the API's minimum is 600.
CERTIFICATE_LIFETIME_SECONDS = 3 * 3600
APPROVED_CONDITION = {
    "type": "Approved",
    "status": "True",
    "reason": "DraConformanceApproved",
    "message": "approved by dra-conformance to act as a node in the authorization matrix",
}
# Conditions after which the signer will not write a certificate.
FINAL_CONDITIONS = ("Denied", "Failed")


class NodeCertificateError(ConformanceError):
    """No node client certificate could be obtained through a CSR; the one-line message says what was seen."""


@dataclass(frozen=True)
class NodeCertificate:
    """A node's client certificate and key on disk, and the CSR they were issued for."""

    user: str
    csr_name: str
    cert_path: Path
    key_path: Path


def node_user(node: str) -> str:
    """The user name the node authorizer knows `node` by."""
    return f"system:node:{node}"


def certificate_request_pem(key: ec.EllipticCurvePrivateKey, node: str) -> bytes:
    """A PKCS#10 request signed by `key` for user `system:node:<node>` in group system:nodes, without SANs."""
    request = x509.CertificateSigningRequestBuilder().subject_name(subject_name(node_user(node), [NODES_GROUP]))
    return request.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_manifest(node: str, request_pem: bytes, signer_name: str = KUBELET_CLIENT_SIGNER) -> dict[str, Any]:
    """The CertificateSigningRequest for a node client certificate, named `dra-conformance-<node>-<random>`."""
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": f"dra-conformance-{node}-", "labels": dict(MANAGED_BY_LABELS)},
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": signer_name,
            "usages": list(NODE_CLIENT_USAGES),
            "expirationSeconds": CERTIFICATE_LIFETIME_SECONDS,
        },
    }


def _conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [condition for condition in status.get("conditions") or [] if condition.get("status", "True") == "True"]


def describe_status(status: dict[str, Any]) -> str:
    """A CSR's status in one line, e.g. `conditions Approved, no certificate`."""
    shown = []
    for condition in _conditions(status):
        detail = ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
        # Our own approval's reason says nothing; a denial's or a signer failure's says why.
        if detail and condition["type"] != "Approved":
            shown.append(f"{condition['type']} ({' '.join(detail.split())})")
        else:
            shown.append(condition["type"])
    conditions = f"conditions {', '.join(shown)}" if shown else "no conditions"
    return f"{conditions}, {'a certificate' if status.get('certificate') else 'no certificate'}"


def unsigned_reason(name: str, signer_name: str, timeout: float, observed: str) -> str:
    """Why a CSR still had no certificate at its deadline, with what to check, in one line."""
    if signer_name.startswith("kubernetes.io/"):
        hint = "is the kube-controller-manager's csrsigning controller running?"
    else:
        hint = f"does a signer for {signer_name} run in this cluster?"
    return f"CSR {name} not signed within {timeout:g} s: {observed}; {hint}"


def api_error(error: ApiException) -> str:
    """An API error as `<status> <reason>: <server message>` on one line."""
    return " ".join(f"{error.status} {error.reason}: {status_message(error)}".split())


def _read_status(admin: client.ApiClient, name: str) -> dict[str, Any]:
    csr = admin.sanitize_for_serialization(client.CertificatesV1Api(admin).read_certificate_signing_request(name))
    return dict(csr.get("status") or {})


def _approve(admin: client.ApiClient, name: str, timeout: float) -> None:
    certificates = client.CertificatesV1Api(admin)

    def approve_unless_decided() -> bool:
        """Approve on the CSR's current version; False on a conflict (someone else changed it meanwhile)."""
        csr: dict[str, Any] = admin.sanitize_for_serialization(certificates.read_certificate_signing_request(name))
        status = csr.setdefault("status", {})
        if any(c["type"] in ("Approved", *FINAL_CONDITIONS) for c in _conditions(status)):
            return True  # the csrapproving controller may approve kubelet client requests of an admin first
        status["conditions"] = [*(status.get("conditions") or []), APPROVED_CONDITION]
        try:
            certificates.replace_certificate_signing_request_approval(name, csr)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    try:
        waits.until(approve_unless_decided, bool, timeout=timeout, what=f"CSR {name} approved")
    except ApiException as error:
        raise NodeCertificateError(f"cannot approve CSR {name}: {api_error(error)}") from None
    except WaitTimeout:
        raise NodeCertificateError(
            f"cannot approve CSR {name} within {timeout:g} s: every attempt conflicted with another change to it"
        ) from None


def _wait_signed(admin: client.ApiClient, name: str, signer_name: str, timeout: float) -> bytes:
    def settled(status: dict[str, Any]) -> bool:
        return bool(status.get("certificate")) or any(c["type"] in FINAL_CONDITIONS for c in _conditions(status))

    try:
        status = waits.until(
            lambda: _read_status(admin, name),
            settled,
            timeout=timeout,
            what=f"CSR {name} signed",
            describe=describe_status,
        )
    except WaitTimeout as error:
        raise NodeCertificateError(unsigned_reason(name, signer_name, timeout, str(error.last_observed))) from None
    if not status.get("certificate"):
        raise NodeCertificateError(f"CSR {name} not signed: {describe_status(status)}")
    return base64.b64decode(status["certificate"])


def delete_request(admin: client.ApiClient, name: str, *, timeout: float) -> None:
    """Delete a CSR and wait until it is gone (a missing one is fine)."""
    certificates = client.CertificatesV1Api(admin)
    try:
        certificates.delete_certificate_signing_request(name)
    except ApiException as error:
        if error.status != 404:
            raise

    def present() -> bool:
        try:
            certificates.read_certificate_signing_request(name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    waits.until(present, lambda still_there: not still_there, timeout=timeout, what=f"CSR {name} deleted")


@contextmanager
def node_client_certificate(
    admin: client.ApiClient,
    node: str,
    directory: Path,
    *,
    timeout: float,
    delete_timeout: float,
    signer_name: str = KUBELET_CLIENT_SIGNER,
) -> Iterator[NodeCertificate]:
    """Obtain a client certificate for `system:node:<node>` from the cluster's signer, as `admin`.

    Writes `<node>.crt` and `<node>.key` into `directory` (the caller removes them) and deletes the CSR on exit.
    Raises `NodeCertificateError` when the CSR cannot be created or approved, is denied, fails, or has no
    certificate after `timeout` seconds; the CSR is deleted then too.
    """
    key = new_key()
    manifest = csr_manifest(node, certificate_request_pem(key, node), signer_name)
    try:
        created = client.CertificatesV1Api(admin).create_certificate_signing_request(manifest)
    except ApiException as error:
        raise NodeCertificateError(f"cannot create a CSR for {node_user(node)}: {api_error(error)}") from None
    name = str(created.metadata.name)
    try:
        _approve(admin, name, timeout)
        cert_pem = _wait_signed(admin, name, signer_name, timeout)
        cert_path, key_path = IssuedCert(cert_pem, key_pem(key)).write(directory, node)
        yield NodeCertificate(node_user(node), name, cert_path, key_path)
    finally:
        delete_request(admin, name, timeout=delete_timeout)


def certificate_client(admin: client.ApiClient, cert_path: Path, key_path: Path) -> client.ApiClient:
    """A client for `admin`'s API server that authenticates with a client certificate."""
    configuration = server_configuration(admin)
    configuration.cert_file, configuration.key_file = str(cert_path), str(key_path)
    return client.ApiClient(configuration)

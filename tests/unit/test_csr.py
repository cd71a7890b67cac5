"""A node certificate request asks for what the kubelet client signer permits, and failures read as one line."""

from __future__ import annotations

import base64
import json

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube import csr


def _request(node: str = "node-a") -> x509.CertificateSigningRequest:
    key = ec.generate_private_key(ec.SECP256R1())
    return x509.load_pem_x509_csr(csr.certificate_request_pem(key, node))


def test_request_names_the_node_user_in_the_nodes_group_and_nothing_else() -> None:
    request = _request("kwok-node-0")
    assert request.is_signature_valid
    assert [a.value for a in request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["system:node:kwok-node-0"]
    assert [a.value for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert len(request.subject) == 2
    assert len(request.extensions) == 0, "the kubelet client signer forbids subjectAltNames"


def test_manifest_asks_the_kubelet_client_signer_for_client_auth_and_is_labelled_ours() -> None:
    pem = b"-----BEGIN CERTIFICATE REQUEST-----\n...\n"
    manifest = csr.csr_manifest("node-a", pem)
    spec = manifest["spec"]
    assert manifest["apiVersion"] == "certificates.k8s.io/v1" and manifest["kind"] == "CertificateSigningRequest"
    assert spec["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert spec["usages"] == ["digital signature", "client auth"]
    assert base64.b64decode(spec["request"]) == pem
    assert spec["expirationSeconds"] >= 600, "the API's minimum lifetime"
    assert manifest["metadata"]["generateName"] == "dra-conformance-node-a-"
    assert manifest["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dra-conformance"}
    assert csr.csr_manifest("node-a", pem, "example.com/nobody")["spec"]["signerName"] == "example.com/nobody"


def test_status_description_lists_true_conditions_with_the_reason_of_a_refusal() -> None:
    assert csr.describe_status({}) == "no conditions, no certificate"
    approved = {"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "kubelet client"}
    assert csr.describe_status({"conditions": [approved]}) == "conditions Approved, no certificate"
    failed = {"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": "bad\nusages"}
    assert csr.describe_status({"conditions": [approved, failed]}) == (
        "conditions Approved, Failed (SignerValidationFailure: bad usages), no certificate"
    )
    assert csr.describe_status({"conditions": [{"type": "Denied", "status": "False"}], "certificate": "LS0t"}) == (
        "no conditions, a certificate"
    )


def test_unsigned_reason_says_what_was_seen_and_which_signer_to_check() -> None:
    assert csr.unsigned_reason(
        "dra-conformance-node-a-x7k2p", csr.KUBELET_CLIENT_SIGNER, 60.0, "conditions Approved, no certificate"
    ) == (
        "CSR dra-conformance-node-a-x7k2p not signed within 60 s: conditions Approved, no certificate; "
        "is the kube-controller-manager's csrsigning controller running?"
    )
    assert csr.unsigned_reason("r", "example.com/nobody", 2.5, "no conditions, no certificate") == (
        "CSR r not signed within 2.5 s: no conditions, no certificate; "
        "does a signer for example.com/nobody run in this cluster?"
    )


def test_api_error_is_the_status_and_the_servers_message_on_one_line() -> None:
    error = ApiException(
        status=403,
        reason="Forbidden",
        body=json.dumps(
            {"kind": "Status", "message": 'user "ci" cannot update resource\n"certificatesigningrequests/approval"'}
        ),
    )
    assert csr.api_error(error) == (
        '403 Forbidden: user "ci" cannot update resource "certificatesigningrequests/approval"'
    )

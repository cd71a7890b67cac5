"""A node identity from a CertificateSigningRequest, the way a cluster whose CA key we do not hold allows one.

The local controller-manager runs the csrsigning controller with the cluster CA, so its kubelet client signer
answers like a real cluster's; a signer name nobody serves stands for a cluster where nothing signs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube.csr import NodeCertificateError, certificate_client, node_client_certificate
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts

# Long enough for the CSR to be created and approved on a busy machine; nothing would sign it anyway.
UNSIGNED_DEADLINE = 3.0


def _csr_exists(api_client: client.ApiClient, name: str) -> bool:
    try:
        client.CertificatesV1Api(api_client).read_certificate_signing_request(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_csr_certificate_authenticates_as_the_node_and_the_csr_is_deleted_after(
    api_client: client.ApiClient, cluster: ClusterInfo, timeouts: Timeouts, tmp_path: Path
) -> None:
    node = cluster.nodes[0]
    with node_client_certificate(
        api_client, node, tmp_path, timeout=timeouts.node_certificate, delete_timeout=timeouts.delete
    ) as certificate:
        assert _csr_exists(api_client, certificate.csr_name)
        with certificate_client(api_client, certificate.cert_path, certificate.key_path) as node_api:
            review = client.AuthenticationV1Api(node_api).create_self_subject_review({})
    user = review.status.user_info
    assert user.username == f"system:node:{node}"
    assert "system:nodes" in user.groups
    assert not _csr_exists(api_client, certificate.csr_name)


def test_csr_nobody_signs_leaves_a_one_line_reason_and_no_csr(
    api_client: client.ApiClient, cluster: ClusterInfo, timeouts: Timeouts, tmp_path: Path
) -> None:
    node = cluster.nodes[0]
    with (
        pytest.raises(NodeCertificateError) as raised,
        node_client_certificate(
            api_client,
            node,
            tmp_path,
            timeout=UNSIGNED_DEADLINE,
            delete_timeout=timeouts.delete,
            signer_name="example.com/nobody",
        ),
    ):
        pytest.fail("a CSR for a signer that does not exist was signed")
    reason = str(raised.value)
    match = re.fullmatch(
        rf"CSR (dra-conformance-{node}-\w+) not signed within 3 s: conditions Approved, no certificate; "
        r"does a signer for example\.com/nobody run in this cluster\?",
        reason,
    )
    assert match, reason
    assert not _csr_exists(api_client, match.group(1))
    assert not list(tmp_path.iterdir()), "no certificate or key is written for an unsigned request"

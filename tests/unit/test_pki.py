"""Certificates the local backend mints carry the identities and names Kubernetes reads from them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_conformance.kube.pki import CertificateAuthority


def _load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_client_certificate_carries_user_as_cn_and_groups_as_o() -> None:
    ca = CertificateAuthority.create("test-ca")
    cert = _load(ca.issue("system:node:kwok-node-0", organizations=["system:nodes"]).cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:kwok-node-0"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    cert.verify_directly_issued_by(ca.cert)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_serving_certificate_lists_dns_and_ip_names() -> None:
    ca = CertificateAuthority.create("test-ca")
    cert = _load(
        ca.issue(
            "kube-apiserver", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True, client=False
        ).cert_pem
    )
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]


def test_ca_written_to_disk_loads_back_and_keeps_issuing(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    cert_path, key_path = ca.write(tmp_path, "ca")
    assert key_path.stat().st_mode & 0o077 == 0, f"key mode {oct(key_path.stat().st_mode)}"
    loaded = CertificateAuthority.load(cert_path, key_path)
    _load(loaded.issue("someone").cert_pem).verify_directly_issued_by(ca.cert)


def test_certificates_from_another_ca_do_not_verify() -> None:
    cluster_ca, front_proxy_ca = CertificateAuthority.create("cluster"), CertificateAuthority.create("front-proxy")
    cert = _load(front_proxy_ca.issue("front-proxy-client").cert_pem)
    try:
        cert.verify_directly_issued_by(cluster_ca.cert)
    except (ValueError, Exception) as error:  # InvalidSignature or ValueError (issuer mismatch)
        assert "issuer" in str(error).lower() or type(error).__name__ == "InvalidSignature", error
    else:
        raise AssertionError("a front-proxy certificate verified against the cluster CA")

"""Certificates and keys for a local cluster, generated with `cryptography`.

ECDSA P-256 everywhere: Kubernetes accepts it for serving, client and service-account signing keys, and a
key takes microseconds instead of the ~50 ms of RSA-2048, which matters for a cluster-up measured in seconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a cluster left running over a holiday; short enough that a leaked key is not forever.
CERT_VALIDITY = datetime.timedelta(days=90)
# Clock skew between the generating process and the components is zero here, but backdating keeps
# certificates valid for components whose clocks are a little behind (VM snapshots).
BACKDATE = datetime.timedelta(minutes=5)


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-256 private key (certificates and certificate requests alike)."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """Serialize a private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def subject_name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """The X.509 name Kubernetes reads as user (CN) and groups (O)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


@dataclass(frozen=True)
class IssuedCert:
    """A certificate and its private key, both PEM encoded."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `<stem>.crt` and `<stem>.key` (mode 0600) and return their paths."""
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        """Create a new self-signed CA."""
        key = new_key()
        now = datetime.datetime.now(datetime.UTC)
        name = subject_name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + CERT_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key=key, cert=cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Load a CA written by `write`."""
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: expected an EC private key")
        return cls(key=key, cert=x509.load_pem_x509_certificate(cert_path.read_bytes()))

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate in PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write the CA certificate and key as `<stem>.crt` and `<stem>.key`."""
        return IssuedCert(self.cert_pem, key_pem(self.key)).write(directory, stem)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = True,
    ) -> IssuedCert:
        """Issue a leaf certificate; the CN is the Kubernetes user name and O the groups."""
        key = new_key()
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + CERT_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return IssuedCert(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def service_account_keypair() -> tuple[bytes, bytes]:
    """Return (private key PEM, public key PEM) for signing service-account tokens (ES256)."""
    key = new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key_pem(key), public

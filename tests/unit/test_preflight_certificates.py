"""A server certificate the kubeconfig's CA does not trust is named as such, not as an unreachable server.

What the API server's real certificate does is tests/cluster/test_preflight.py's; here the wording of each kind of
TLS verification failure, and finding it inside what urllib3 raises.
"""

from __future__ import annotations

import ssl

import pytest
from urllib3.exceptions import MaxRetryError, NewConnectionError, SSLError

from dra_conformance.kube.preflight import certificate_cause, certificate_error

# OpenSSL's X509_V_ERR_* codes, as ssl.SSLCertVerificationError.verify_code carries them.
UNABLE_TO_GET_LOCAL_ISSUER = 20
SELF_SIGNED = 18
EXPIRED = 10
HOSTNAME_MISMATCH = 62


def _failure(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    error.verify_code = code
    error.verify_message = message
    return error


def test_the_verification_failure_is_found_inside_urllib3s_retry_error() -> None:
    failure = _failure(UNABLE_TO_GET_LOCAL_ISSUER, "unable to get local issuer certificate")
    assert certificate_error(MaxRetryError(None, "/version", SSLError(failure))) is failure  # type: ignore[arg-type]


def test_a_refused_connection_is_no_certificate_failure() -> None:
    refused = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")  # type: ignore[arg-type]
    assert certificate_error(MaxRetryError(None, "/version", refused)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "message", "has_ca", "cause"),
    [
        (
            UNABLE_TO_GET_LOCAL_ISSUER,
            "unable to get local issuer certificate",
            True,
            "certificate not trusted by the kubeconfig's CA: its certificate-authority did not sign the server's "
            "(unable to get local issuer certificate)",
        ),
        (
            SELF_SIGNED,
            "self-signed certificate",
            True,
            "certificate not trusted by the kubeconfig's CA: its certificate-authority did not sign the server's "
            "(self-signed certificate)",
        ),
        (
            UNABLE_TO_GET_LOCAL_ISSUER,
            "unable to get local issuer certificate",
            False,
            "certificate not trusted: the kubeconfig names no certificate-authority and no system CA signed it "
            "(unable to get local issuer certificate)",
        ),
        (EXPIRED, "certificate has expired", True, "server certificate rejected: certificate has expired"),
        (
            HOSTNAME_MISMATCH,
            "Hostname mismatch, certificate is not valid for '10.0.0.1'.",
            True,
            "server certificate rejected: Hostname mismatch, certificate is not valid for '10.0.0.1'.",
        ),
    ],
)
def test_each_verification_failure_reads_as_what_the_kubeconfig_holder_must_fix(
    code: int, message: str, has_ca: bool, cause: str
) -> None:
    assert certificate_cause(_failure(code, message), has_ca=has_ca) == cause

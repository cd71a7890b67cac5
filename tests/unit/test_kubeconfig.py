"""Kubeconfigs we write are readable by the official client."""

from __future__ import annotations

from pathlib import Path

from dra_conformance.kube import kubeconfig
from dra_conformance.kube.pki import CertificateAuthority


def test_written_kubeconfig_loads_with_the_official_client(tmp_path: Path) -> None:
    from kubernetes import config

    ca = CertificateAuthority.create("ca")
    issued = ca.issue("alice", organizations=["team"])
    path = kubeconfig.write(
        tmp_path / "kubeconfig",
        kubeconfig.render(
            "https://127.0.0.1:6443",
            ca.cert_pem,
            user="alice",
            client_cert_pem=issued.cert_pem,
            client_key_pem=issued.key_pem,
        ),
    )
    assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
    api_client = config.new_client_from_config(config_file=str(path))
    assert api_client.configuration.host == "https://127.0.0.1:6443"
    assert Path(api_client.configuration.cert_file).read_bytes() == issued.cert_pem


def test_token_kubeconfig_carries_the_token() -> None:
    document = kubeconfig.render("https://h:1", b"ca", user="sa", token="t0k3n")
    assert document["users"] == [{"name": "sa", "user": {"token": "t0k3n"}}]

"""Kubeconfigs we write are readable by the official client."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.errors import UsageError
from dra_conformance.kube import kubeconfig
from dra_conformance.kube.client import client_from_kubeconfig
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


def test_a_context_the_kubeconfig_lacks_is_one_line_naming_those_it_has(tmp_path: Path) -> None:
    path = kubeconfig.write(tmp_path / "kubeconfig", kubeconfig.render("https://h:1", b"ca", user="sa", token="t"))
    with pytest.raises(UsageError) as refused:
        client_from_kubeconfig(path, "nope")
    message = str(refused.value)
    assert (
        message == f"kubeconfig {path}: no context 'nope'; it has 'sa@dra-conformance' (current: sa@dra-conformance)"
    ), message
    client_from_kubeconfig(path, "sa@dra-conformance").close()


def test_run_with_a_missing_context_exits_2_naming_the_contexts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = kubeconfig.write(tmp_path / "kubeconfig", kubeconfig.render("https://h:1", b"ca", user="sa", token="t"))
    code = main(["run", "--cluster", "existing", "--kubeconfig", str(path), "--context", "nope"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and len(err.splitlines()) == 1, f"exit {code}: {err}"
    assert "no context 'nope'; it has 'sa@dra-conformance'" in err, err

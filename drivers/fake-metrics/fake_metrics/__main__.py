"""`fake-metrics`: serve metrics.k8s.io v1 and v1beta1 behind the aggregation layer until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kubernetes import config

from dra_wire.kube_json import CoreReader
from dra_wire.stop_signals import hold_stop_signals, wait_for_stop_signal
from fake_metrics import control, server
from fake_metrics.samples import FaultBox


def main(argv: list[str] | None = None) -> int:
    """Run until a signal."""
    parser = argparse.ArgumentParser(prog="fake-metrics", description=__doc__)
    parser.add_argument("--bind-address", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", type=Path, required=True)
    parser.add_argument("--tls-private-key-file", type=Path, required=True)
    parser.add_argument("--requestheader-client-ca-file", type=Path, required=True)
    parser.add_argument("--requestheader-allowed-names", default="front-proxy-client")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--control-socket", type=Path, required=True)
    args = parser.parse_args(argv)
    hold_stop_signals()  # before the servers start their threads

    core = CoreReader(
        config.new_client_from_config(config_file=str(args.kubeconfig), persist_config=False), server.LIST_TIMEOUT
    )
    faults = FaultBox()
    requests: list[dict[str, Any]] = []
    https = server.serve(
        (args.bind_address, args.port),
        cert=args.tls_cert_file,
        key=args.tls_private_key_file,
        front_proxy_ca=args.requestheader_client_ca_file,
        allowed_names=set(args.requestheader_allowed_names.split(",")),
        faults=faults,
        core=core,
        requests=requests,
    )
    controller = control.serve(args.control_socket, faults, requests)
    print(f"fake-metrics serving metrics.k8s.io on {args.bind_address}:{args.port}", flush=True)
    wait_for_stop_signal()
    https.shutdown()
    controller.shutdown()
    args.control_socket.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

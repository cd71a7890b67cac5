"""Addresses of a local cluster: everything listens on loopback; fake nodes get loopback addresses of their own."""

from __future__ import annotations

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
# The first service IP is the `kubernetes` Service; it must be a SAN of the serving cert even though nothing
# here routes to it (no kube-proxy).
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
FRONT_PROXY_CLIENT = "front-proxy-client"
# Fake pod IPs handed out by kwok; never dialled (see the design's "loopback only").
POD_CIDR = "10.244.0.1/16"
# Fake nodes get distinct loopback addresses, starting here.
NODE_ADDRESS_BASE = 10


def node_address(index: int) -> str:
    """Loopback address of the fake node with this index (127.0.0.10, .11, ...)."""
    return f"127.0.0.{NODE_ADDRESS_BASE + index}"

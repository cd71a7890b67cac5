"""What every component builder shares: the protocol, and what the control plane's flags are rendered from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from dra_conformance.backends.local.build import Binaries
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.backends.local.process_plan import ProcessSpec

ContextT = TypeVar("ContextT", contravariant=True)
ClusterT = TypeVar("ClusterT", contravariant=True)


class Component(Protocol[ContextT, ClusterT]):
    """One part of a local cluster.

    `command` renders the processes that run it, flags and all, from what it is given (no process started);
    `ready` waits until it does its job in the running cluster, and raises naming what it saw if it does not.
    """

    @property
    def name(self) -> str:
        """The component's name: its process's, or its start-up phase's."""
        ...

    def command(self, context: ContextT) -> list[ProcessSpec]:
        """The processes that run this component."""
        ...

    def ready(self, cluster: ClusterT) -> None:
        """Return once the component does its job; raise a one-line error naming what was seen otherwise."""
        ...


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one local cluster's control plane, reserved at `up` (see ports.py)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int


@dataclass(frozen=True)
class ControlPlaneContext:
    """What the control plane's flags name: binaries, ports, and the files `control_plane.render` wrote."""

    layout: ClusterLayout
    binaries: Binaries
    ports: Ports
    # `--feature-gates` of every Kubernetes component.
    feature_gates: str
    # Component (controller-manager, scheduler, kwok) -> the kubeconfig of its identity.
    kubeconfigs: dict[str, Path]
    # The scheduler's client QPS and burst; None keeps its defaults (50, 100), as a default cluster runs it.
    scheduler_qps: int | None = None

    @property
    def server(self) -> str:
        """The API server's URL."""
        return server_url(self.ports)


def serving_flags(context: ControlPlaneContext, component: str) -> list[str]:
    """The flags that give a component the serving certificate the cluster CA issued it at render."""
    cert, key = context.layout.serving_cert(component)
    return [f"--tls-cert-file={cert}", f"--tls-private-key-file={key}"]


def server_url(ports: Ports) -> str:
    """The URL of the API server listening on `ports.apiserver`."""
    return f"https://{LOOPBACK}:{ports.apiserver}"

"""The sockets a driver serves on a node (registration and plugin sockets), where this machine sees them."""

from __future__ import annotations

from pathlib import Path

from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.processes import listening


def served_sockets(endpoint: DriverEndpoint, driver: str) -> tuple[list[Path], str]:
    """The driver's live sockets under the kubelet's plugins_registry/ and plugins/<driver>/, or why none are judged.

    Only the sockets someone listens on: files left by instances killed earlier (SIGKILL cleans up nothing) are not
    the running instance's to remove. Where the sockets reach this machine through a node agent's relay, they are
    not the driver's.
    """
    if endpoint.node_kubelet_root is not None and not endpoint.bound:
        return [], (
            f"the sockets on {endpoint.node} reach this machine through a node agent's relay, whose sockets are not "
            "the driver's"
        )
    root = endpoint.kubelet_root
    found = sorted(
        path
        for path in [*(root / "plugins_registry").glob(f"{driver}*.sock"), *(root / "plugins" / driver).glob("*.sock")]
        if path.is_socket()
    )
    live = [path for path in found if listening(path)]
    if not live:
        stale = f" ({len(found)} left by earlier instances, nobody listening)" if found else ""
        return [], f"no live socket of {driver} under {root}/plugins_registry or {root}/plugins/{driver}{stale}"
    return live, ""

"""Where the driver under test can be reached: its kubelet-plugin sockets, per node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dra_conformance.errors import RelayUnavailable

# The directories of a kubelet root whose sockets a node agent relays: registration sockets, the drivers' own.
RELAYED_DIRECTORIES = ("plugins_registry", "plugins")
# In a mirror of a node's kubelet root (sockets relayed by a node agent): what the relay could not carry, one line
# per connection, appended as it happens (`kubelet.socket_relay.SocketMirror`).
RELAY_ERRORS = ".relay-errors"


@dataclass(frozen=True)
class DriverEndpoint:
    """Where one driver instance on one node can be reached."""

    driver: str
    node: str
    kubelet_root: Path
    # The node's CDI spec directory the driver writes to, where this machine can read it.
    cdi_dir: Path | None = None
    # Set where `kubelet_root` is a local mirror of the node's kubelet root (sockets relayed by a node agent): the
    # node's own kubelet root, which paths the driver names (GetInfo's endpoint) are relative to.
    node_kubelet_root: PurePosixPath | None = None
    # Set with `node_kubelet_root` where `kubelet_root` is the node's own root seen through a bind mount (a further
    # real node of the local cluster, in its own mount namespace): every file is there, not only relayed sockets,
    # and a path elsewhere is the same path on this machine.
    bound: bool = False

    def relay_errors(self) -> list[str]:
        """What the node agent's relay could not carry so far (always none where the sockets are not relayed)."""
        if self.node_kubelet_root is None or self.bound:
            return []
        try:
            return (self.kubelet_root / RELAY_ERRORS).read_text().splitlines()
        except FileNotFoundError:
            return []

    def reachable_on_node(self, local: Path) -> str:
        """The node's path of a socket this machine reaches at `local` (the inverse of `reachable`)."""
        if self.node_kubelet_root is None or not local.is_relative_to(self.kubelet_root):
            return str(local)
        return str(self.node_kubelet_root / local.relative_to(self.kubelet_root).as_posix())

    def reachable(self, path: str) -> str:
        """Where this machine reaches the socket the driver names by its path on the node.

        A relayed endpoint reaches only sockets in RELAYED_DIRECTORIES: a path elsewhere (the contract lets GetInfo
        name any) is the relay's limit, `RelayUnavailable`, never the driver's failure.
        """
        if self.node_kubelet_root is None:
            return path
        named = PurePosixPath(path)
        if self.bound:
            inside = named.is_relative_to(self.node_kubelet_root)
            return str(self.kubelet_root / named.relative_to(self.node_kubelet_root)) if inside else path
        if not any(named.is_relative_to(self.node_kubelet_root / d) for d in RELAYED_DIRECTORIES):
            raise RelayUnavailable(
                f"{self.driver} on {self.node} names socket {path}; the node agent's relay carries only sockets under "
                f"{', '.join(str(self.node_kubelet_root / d) for d in RELAYED_DIRECTORIES)}"
            )
        return str(self.kubelet_root / named.relative_to(self.node_kubelet_root))

    @property
    def root_on_node(self) -> PurePosixPath:
        """The kubelet root as the node's processes see it (pods' hostPath volumes name it so)."""
        return self.node_kubelet_root or PurePosixPath(self.kubelet_root)

    @property
    def registrar_dir(self) -> Path:
        """The kubelet's plugin registration directory, `<kubelet root>/plugins_registry`."""
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """The driver's own directory under the kubelet root, `<kubelet root>/plugins/<driver>`."""
        return self.kubelet_root / "plugins" / self.driver

    @property
    def registration_socket(self) -> Path:
        """The driver's socket in the registration directory.

        The kubelet considers any socket there whose name does not start with a dot; `<driver>-reg.sock` is only
        the kubeletplugin helper's default, so that name is preferred; then, as during a rolling update with
        per-instance names (`<driver>-<pod uid>-reg.sock`), the newest such socket, as the kubelet uses the most
        recently registered instance; then the first other socket.
        """
        default = self.registrar_dir / f"{self.driver}-reg.sock"
        if default.is_socket() or not self.registrar_dir.is_dir():
            return default
        instances = [p for p in self.registrar_dir.glob(f"{self.driver}-*-reg.sock") if p.is_socket()]
        if instances:
            return max(instances, key=_modified)
        others = sorted(p for p in self.registrar_dir.iterdir() if p.is_socket() and not p.name.startswith("."))
        return others[0] if others else default

    @property
    def control_socket(self) -> Path:
        """The fake driver's control socket (absent for other drivers); per instance, the newest, as above."""
        default = self.plugins_dir / "control.sock"
        instances = (
            [p for p in self.plugins_dir.glob("control-*.sock") if p.is_socket()] if not default.exists() else []
        )
        return max(instances, key=_modified) if instances else default


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # gone since it was listed
        return 0.0

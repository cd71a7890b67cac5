"""A further real node's own mount and network namespaces, so several kubelets share one machine.

Each further real node (index 1 and up; node 0 uses the host's namespaces) sees its own `/var/lib/kubelet`,
`/var/run/cdi`, `/etc/cdi`, containerd and CNI state and pod logs: directories of the cluster bound over the standard
paths in a private mount namespace. So a vendor's DaemonSet with fixed host paths runs on every node, each with its
own state, exactly as on separate machines. The node's network namespace is joined to the host by a veth pair (a
/30 per node, routed, no NAT), and the kubelet's cgroups live under a cgroup root of the node's own.

Nothing below is visible on the host but the empty mount-point directories (created where absent, recorded by the
first node's `HostRecord` and removed at teardown), the veth's host end and the node's cgroup root. Both namespaces
are held by files (bind-mounted namespace handles); `remove` drops them, and with them every mount the node's
kubelet and containerd made inside.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.layout import STANDARD_CDI_DIR, STANDARD_KUBELET_ROOT, STATIC_CDI_DIR, ClusterLayout
from dra_conformance.errors import BackendError

# Node i's link: host end .1, node end .2 of 10.89.i.0/30. Refused at start where the machine routes that range.
NODE_LINKS = ipaddress.IPv4Network("10.89.0.0/16")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The further nodes' cgroup roots, one per node directly below each hierarchy's root.
CGROUP_PREFIX = "dra-conformance-node-"
# The standard paths a node's processes see as its own (the kubelet root first: the others may lie below none).
PRIVATE_PATHS = (
    STANDARD_KUBELET_ROOT,
    STANDARD_CDI_DIR,
    STATIC_CDI_DIR,
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/run/netns"),
    # containerd's NRI socket is at a fixed path (/var/run/nri/nri.sock): one per node, or the second fails to start.
    Path("/run/nri"),
)
# `ip`, `unshare`, `mount`: milliseconds each; generous for a loaded machine.
COMMAND_TIMEOUT = 30.0


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BackendError(f"real node: {what}: {error}") from None
    if done.returncode != 0:
        raise BackendError(f"real node: {what}: {' '.join((done.stderr or done.stdout).split())}")
    return done.stdout


@dataclass(frozen=True)
class NodeNamespace:
    """The namespaces of further real node `node` (its `index` in the cluster, 1 and up)."""

    node: str
    index: int
    # The cluster's state directory (absolute) and short runtime directory.
    state_dir: str
    runtime_dir: str

    @classmethod
    def of(cls, layout: ClusterLayout, node: str, index: int) -> NodeNamespace:
        """Node `node`, the `index`th real node of the cluster in `layout`."""
        if index < 1:
            raise ValueError("node 0 runs in the host's namespaces")
        layout = ClusterLayout(layout.root.resolve())
        return cls(node, index, str(layout.root), str(drivers.runtime_dir(layout)))

    @property
    def _tag(self) -> str:
        return drivers.runtime_tag(ClusterLayout(Path(self.state_dir)))

    @property
    def netns(self) -> str:
        """The network namespace's name (`ip netns`)."""
        return f"dra-{self._tag}-n{self.index}"

    @property
    def netns_path(self) -> Path:
        """The network namespace's handle."""
        return Path("/run/netns") / self.netns

    @property
    def host_link(self) -> str:
        """The host end of the node's veth pair."""
        return f"dra{self._tag}n{self.index}"

    @property
    def _link(self) -> list[ipaddress.IPv4Address]:
        base = NODE_LINKS.network_address + 4 * self.index  # the index-th /30
        return [base + 1, base + 2]

    @property
    def host_address(self) -> str:
        """The host end's address (the node's default gateway)."""
        return str(self._link[0])

    @property
    def address(self) -> str:
        """The node's address: the kubelet's node IP."""
        return str(self._link[1])

    @property
    def files(self) -> Path:
        """The node's own directories, bound over PRIVATE_PATHS (the kubelet root's is the short runtime one)."""
        return Path(self.state_dir) / "nodes" / self.node / "private"

    @property
    def kubelet_root(self) -> Path:
        """Where this machine sees the node's /var/lib/kubelet (`drivers.kubelet_root`: as short a path)."""
        return drivers.kubelet_root(ClusterLayout(Path(self.state_dir)), self.node)

    def host_view(self, path: Path) -> Path:
        """Where this machine sees `path`, a standard path as the node's processes see it."""
        if path == STANDARD_KUBELET_ROOT:
            return self.kubelet_root
        return self.files / str(path).strip("/").replace("/", "_")

    @property
    def mount_ns(self) -> Path:
        """The mount namespace's handle (a file in a private bind mount of its directory)."""
        return Path(self.runtime_dir) / f"ns-{self.index}" / "mnt"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's `cgroupRoot`: the node's pods' cgroups go below it, apart from every other node's."""
        return f"/{CGROUP_PREFIX}{self._tag}-{self.index}"

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run in the node's namespaces."""
        return ["nsenter", f"--mount={self.mount_ns}", f"--net={self.netns_path}", "--", *argv]

    # --- life cycle -----------------------------------------------------------------------------------------------

    def create(self) -> None:
        """The namespaces, the link and the cgroup root; the mount points on the host are created where absent."""
        self._refuse_routed_range()
        self.record()
        self._network()
        self._mounts()
        for hierarchy in cgroup_hierarchies():
            cgroup = hierarchy / self.cgroup_root.lstrip("/")
            cgroup.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # cgroup v1 cpuset: a new cgroup holds no CPU until given one
                if (cgroup / name).exists() and not (cgroup / name).read_text().strip():
                    (cgroup / name).write_text((hierarchy / name).read_text())

    def _refuse_routed_range(self) -> None:
        routes = _run(["ip", "-4", "route", "show"], "list routes").splitlines()
        for route in routes:
            destination = route.split()[0]
            with contextlib.suppress(ValueError):
                network = ipaddress.ip_network(destination, strict=False)
                if network.overlaps(NODE_LINKS) and not route.split()[-1].startswith("dra"):
                    raise BackendError(
                        f"real node {self.node}: this machine routes {destination}, in {NODE_LINKS}, which the further "
                        "real nodes' links use; run with one real node (--real-nodes 1)"
                    )

    def _network(self) -> None:
        _run(["ip", "netns", "add", self.netns], f"network namespace {self.netns}")
        _run(
            ["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "eth0", "netns", self.netns],
            f"veth pair {self.host_link}",
        )
        _run(["ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link], f"address of {self.host_link}")
        _run(["ip", "link", "set", self.host_link, "up"], f"{self.host_link} up")
        inside = ["ip", "-n", self.netns]
        _run([*inside, "addr", "add", f"{self.address}/30", "dev", "eth0"], f"address of {self.node}")
        _run([*inside, "link", "set", "eth0", "up"], f"{self.node} eth0 up")
        _run([*inside, "link", "set", "lo", "up"], f"{self.node} lo up")
        _run([*inside, "route", "add", "default", "via", self.host_address], f"{self.node} default route")

    def _mounts(self) -> None:
        holder = self.mount_ns.parent
        holder.mkdir(parents=True, exist_ok=True)
        # A namespace handle may be bind-mounted only onto a file in a private mount.
        _run(["mount", "--bind", str(holder), str(holder)], f"bind {holder}")
        _run(["mount", "--make-private", str(holder)], f"make {holder} private")
        self.mount_ns.touch()
        binds = []
        for path in PRIVATE_PATHS:
            target = path.resolve()  # /var/run is a link to /run on most machines
            target.mkdir(parents=True, exist_ok=True)
            source = self.host_view(path)
            source.mkdir(parents=True, exist_ok=True)
            binds.append(f"mount --bind {source} {target}")
        _run(
            ["unshare", f"--mount={self.mount_ns}", "--propagation", "private", "sh", "-ec", " && ".join(binds)],
            f"mount namespace of {self.node}",
        )

    def record(self) -> None:
        """Note the node's namespaces for `remove` (before any is made, so a failed start is undone too)."""
        path = records_path(Path(self.state_dir))
        known = [n for n in read_records(Path(self.state_dir)) if n.node != self.node]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([asdict(n) for n in [*known, self]], indent=2))

    def remove(self) -> list[str]:
        """Drop the namespaces, the link and the cgroup root (its processes already killed); what could not be."""
        problems = []
        with contextlib.suppress(OSError):
            if self.netns_path.exists():
                subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True, check=False)
        if Path(f"/sys/class/net/{self.host_link}").exists():
            subprocess.run(["ip", "link", "delete", self.host_link], capture_output=True, check=False)
        for handle in (self.mount_ns, self.mount_ns.parent):
            if _is_mount_point(handle):
                if subprocess.run(["umount", str(handle)], capture_output=True, check=False).returncode != 0:
                    subprocess.run(["umount", "-l", str(handle)], capture_output=True, check=False)
        if self.kubelet_root.is_dir() and not _is_mount_point(self.kubelet_root):
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(self.kubelet_root)], capture_output=True)
        if self.mount_ns.parent.is_dir() and not _is_mount_point(self.mount_ns.parent):
            for entry in self.mount_ns.parent.iterdir():
                entry.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.mount_ns.parent.rmdir()
        for hierarchy in cgroup_hierarchies():
            top = hierarchy / self.cgroup_root.lstrip("/")
            for cgroup in sorted((Path(p) for p, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True):
                try:
                    cgroup.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as error:
                    problems.append(f"cgroup {cgroup}: {error.strerror}")
        if self.netns_path.exists():
            problems.append(f"network namespace {self.netns_path}")
        return problems

    def leftovers(self) -> list[str]:
        """What of the node's namespaces is still on the host."""
        found = [f"network namespace {self.netns}"] if self.netns_path.exists() else []
        found += [f"network device {self.host_link}"] if Path(f"/sys/class/net/{self.host_link}").exists() else []
        found += [f"mount {self.mount_ns}"] if _is_mount_point(self.mount_ns) else []
        found += [f"path {self.kubelet_root}"] if self.kubelet_root.exists() else []
        found += [
            f"cgroup {hierarchy / self.cgroup_root.lstrip('/')}"
            for hierarchy in cgroup_hierarchies()
            if (hierarchy / self.cgroup_root.lstrip("/")).exists()
        ]
        return found


def cgroup_hierarchies() -> list[Path]:
    """The cgroup hierarchies the kubelet uses: the unified one (v2), or each v1 one (and a hybrid's unified one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def _is_mount_point(path: Path) -> bool:
    resolved = str(path.resolve()) if path.exists() else str(path)
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            if line.split()[4] == resolved:
                return True
    return False


def records_path(state_dir: Path) -> Path:
    """Where the further real nodes' namespaces of the cluster in `state_dir` are noted."""
    return state_dir / "nodes" / "namespaces.json"


def read_records(state_dir: Path) -> list[NodeNamespace]:
    """The further real nodes' namespaces noted for the cluster in `state_dir` (none when it has no such node)."""
    try:
        return [NodeNamespace(**entry) for entry in json.loads(records_path(state_dir).read_text())]
    except (OSError, ValueError, TypeError):
        return []

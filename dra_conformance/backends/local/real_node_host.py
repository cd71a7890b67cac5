"""The local cluster's real node: a kubelet v1.37 on containerd 2 and runc, on this machine.

The kubelet joins the local control plane with a `system:node:<name>` client certificate and registers with a
taint that only kubelet-mode checks tolerate. The driver under test runs there as a DaemonSet pod
(`driver_daemonset`), in the kubelet's own root directory, so the kubelet finds it through `plugins_registry` and
calls it for real, and containerd injects what the driver's CDI specs say.

A node changes its host: sysctls, a CNI bridge, `kubepods` cgroups in every hierarchy, mounts, network
namespaces, and a few fixed paths the kubelet and containerd hard-code. `HostRecord` writes down, before anything
starts, what was there; `teardown` (run by the supervisor after it stopped its children, and again by
`cluster down` after a killed run) removes what the node added and restores the rest. It never remounts cgroups
and only signals processes that are ours: those in the node's own cgroups, and shims of our containerd binary.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dra_conformance import versions
from dra_conformance.backends.local import api_relay, drivers, images, install_record, node_namespace
from dra_conformance.backends.local.build import RealNodeBinaries
from dra_conformance.backends.local.layout import (
    CONTAINERD_CDI_DIRS,
    STANDARD_CDI_DIR,
    STANDARD_KUBELET_ROOT,
    STATIC_CDI_DIR,
    ClusterLayout,
)
from dra_conformance.backends.local.layout import REAL_NODE as REAL_NODE
from dra_conformance.backends.local.node_namespace import NodeNamespace
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.errors import BackendError, WaitTimeout
from dra_conformance.kube import kubeconfig, waits
from dra_conformance.kube.builders import PAUSE_IMAGE
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.model.cluster import REAL_NODE_TAINT
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.rollback import device_plugin

# A SIGKILLed process is still a member of its cgroup until it has exited, and rmdir of a busy cgroup fails
# (EBUSY): teardown waits for the exits, then retries. Generous bounds for a loaded machine; the sum stays within
# the process_stop share `cluster down` gives the supervisor's teardown.
KILLED_PROCESSES_EXIT_TIMEOUT = 10.0
CGROUP_RELEASE_TIMEOUT = 5.0
# Pods on the real node get addresses from this bridge (no masquerading, no port mapping: no iptables rules).
BRIDGE = "dracni0"
POD_SUBNET = "10.88.0.0/16"
# What the kubelet and the bridge plugin change; restored on teardown.
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
)
# The kubelet's device-plugin directory: hard-coded whatever its --root-dir (k8s.io/kubelet
# pkg/apis/deviceplugin/v1beta1 DevicePluginPath); it holds kubelet.sock, the plugins' sockets and a checkpoint.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# Paths the kubelet, containerd and the CNI plugins use whatever they are configured with; removed on teardown
# when they did not exist before the node started.
FIXED_PATHS = (
    str(STANDARD_KUBELET_ROOT),
    str(STANDARD_CDI_DIR),
    str(STATIC_CDI_DIR),
    str(DEVICE_PLUGIN_DIR),
    "/var/lib/cni",
    "/run/containerd",
    "/run/nri",
    "/var/log/containers",
    "/var/log/pods",
)
# The reference device plugin (dra_conformance.rollback.device_plugin) runs on the real node as a supervised host
# process, next to the kubelet it registers with: the rollback rehearsal's device-plugin path through a real kubelet.
DEVICE_PLUGIN_RESOURCE = "example.com/gpu"
# The rehearsal holds at most three devices at once on its device-plugin node (w1 and w3 kept, plus w4 or one
# baseline pod at a time); one spare, because a deleted pod's device returns to the kubelet only once the kubelet
# has dropped the pod, which can trail its deletion from the API.
DEVICE_PLUGIN_DEVICES = 4
DEVICE_PLUGIN_SOCKET = "dra-conformance-device-plugin.sock"
# The plugin registers within a second; the kubelet then reports the resource with its next node status update
# (every 10 s by default), so two updates and a loaded machine's start-up.
DEVICE_PLUGIN_READY = 60.0
# Standard directories the node writes into (the kubelet root is /var/lib/kubelet, a vendor's driver writes CDI
# specs to /var/run/cdi, its chart static ones to /etc/cdi): where one existed before, what was in it is recorded
# and everything else removed after.
GUARDED_DIRS = (STANDARD_KUBELET_ROOT, STANDARD_CDI_DIR, STATIC_CDI_DIR)
# What another kubelet keeps in its root (a file, or a directory with entries): the node refuses to start on it.
KUBELET_STATE = (
    "pods",
    "plugins_registry",
    "plugins",
    "pod-resources",
    "checkpoints",
    "cpu_manager_state",
    "memory_manager_state",
    "dra_manager_state",
    "pki",
    "config.yaml",
    "kubeconfig",
)
# How teardown removes a directory tree: never into another file system below it, nor the tree itself where it is
# a mount point (on another device than its parent): a mount left by a failed unmount keeps what it shows.
SAFE_RM = ("--one-file-system", "--preserve-root=all", "--")
NETNS_DIR = Path("/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
# containerd answers on its socket within a second of start; its CRI plugin loads the CNI config at once.
CONTAINERD_READY = 30.0
# `ctr images import` of a few MiB of local archive.
IMPORT_TIMEOUT = 60.0
# ... and of a vendor's image archive (the reference driver's is 300 MiB: Debian and Python) on a loaded disk.
VENDOR_IMPORT_TIMEOUT = 600.0
# The kubelet's listening ports (the node has a real address, so they cannot clash with kwok's loopback ones).
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBELET_SYNC_FREQUENCY = "10s"
KUBELET_NODE_STATUS_FREQUENCY = "1s"


def primary_address() -> str:
    """The machine's first global IPv4 address (the kubelet refuses a loopback node IP)."""
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True)
    for line in listed.stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    raise BackendError("real node: this machine has no global IPv4 address (ip -4 addr); the kubelet needs one")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


@dataclass(frozen=True)
class HostRecord:
    """What the host looked like before the node started: the state teardown restores."""

    sysctls: dict[str, str]
    absent_paths: list[str]
    netns: list[str]
    containerd_shim: str
    # Per guarded directory that existed: every path in it (relative), which is all that may be there afterwards.
    entries: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def take(cls, shim: Path, guarded: tuple[Path, ...] = GUARDED_DIRS) -> HostRecord:
        """Read the host now."""
        return cls(
            sysctls={name: _sysctl_path(name).read_text().strip() for name in SYSCTLS if _sysctl_path(name).exists()},
            absent_paths=[path for path in FIXED_PATHS if not os.path.lexists(path)],
            netns=sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else [],
            containerd_shim=str(shim.resolve()),
            entries={str(root): snapshot(root) for root in guarded if root.is_dir() and not root.is_symlink()},
        )

    def write(self, path: Path) -> None:
        """Save as JSON (before the node starts, so a killed run can still be undone)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> HostRecord | None:
        """The saved record, or None when no node was started."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def snapshot(root: Path) -> list[str]:
    """Every path below `root` (relative, sorted), symbolic links not followed."""
    found = []
    for directory, subdirs, files in os.walk(root):
        found += [os.path.relpath(os.path.join(directory, name), root) for name in (*subdirs, *files)]
    return sorted(found)


def new_entries(root: Path, before: list[str]) -> list[Path]:
    """The paths below `root` that are not in `before`: the top-most of each new subtree only."""
    known = set(before)
    new: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        for name in sorted((*subdirs, *files)):
            relative = os.path.relpath(os.path.join(directory, name), root)
            if relative not in known:
                new.append(root / relative)
        subdirs[:] = [d for d in subdirs if os.path.relpath(os.path.join(directory, d), root) in known]
    return new


def remove_new_entries(root: Path, before: list[str]) -> list[str]:
    """Remove what was added below `root` since `before` (mounts already undone); return what could not be."""
    problems = []
    for path in new_entries(root, before):
        if path.is_dir() and not path.is_symlink():
            done = subprocess.run(["rm", "-rf", *SAFE_RM, str(path)], capture_output=True, text=True)
            if done.returncode != 0:
                problems.append(f"path {path}: {' '.join(done.stderr.split())}")
        else:
            path.unlink(missing_ok=True)
    return problems


def other_kubelet_state(root: Path = STANDARD_KUBELET_ROOT) -> list[str]:
    """What of another kubelet's state `root` holds (KUBELET_STATE names present as a file or a non-empty dir)."""
    found = []
    for name in KUBELET_STATE:
        path = root / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            found.append(str(path))
    return found


def refuse_other_kubelet() -> None:
    """One line, before anything starts, when the standard kubelet root holds another kubelet's state."""
    other = other_kubelet_state()
    if other:
        raise BackendError(
            f"real node: {STANDARD_KUBELET_ROOT} holds another kubelet's state ({', '.join(other[:3])}); the real "
            "node's kubelet uses that root, so it runs only on a machine where no other kubelet does"
        )


def host_record_path(layout: ClusterLayout) -> Path:
    """Where the host record of the cluster's real node lives."""
    return layout.root / "nodes" / REAL_NODE / "host.json"


def node_name(index: int) -> str:
    """The name of the cluster's `index`th real node."""
    return f"real-node-{index}"


def node_index(node: str) -> int | None:
    """The index of real node `node`; None for a node of another name."""
    number = node.removeprefix("real-node-")
    return int(number) if node.startswith("real-node-") and number.isdigit() else None


def process_name(component: str, node: str) -> str:
    """The supervisor's name of `component` (kubelet, containerd, ...) of real node `node`."""
    return component if node == REAL_NODE else f"{component}-{node}"


def containerd_socket(layout: ClusterLayout, node: str = REAL_NODE) -> Path:
    """The gRPC socket of the containerd of real node `node` of the cluster in `layout` (the kubelet's endpoint)."""
    index = node_index(node) or 0
    name = "containerd" if index == 0 else f"containerd-{index}"
    return drivers.runtime_dir(ClusterLayout(layout.root.resolve())) / name / "containerd.sock"


def standard_endpoint(layout: ClusterLayout, driver: str, node: str) -> DriverEndpoint:
    """Where this machine reaches `driver` registered at the standard kubelet root of real node `node`.

    Node 0's standard paths are this machine's; a further node's are its own directories, bound over them in its
    mount namespace.
    """
    index = node_index(node) or 0
    if index == 0:
        return DriverEndpoint(driver, node, STANDARD_KUBELET_ROOT, STANDARD_CDI_DIR)
    namespace = NodeNamespace.of(layout, node, index)
    return DriverEndpoint(
        driver,
        node,
        namespace.kubelet_root,
        namespace.host_view(STANDARD_CDI_DIR),
        PurePosixPath(STANDARD_KUBELET_ROOT),
        bound=True,
    )


class RealNode:
    """Files and processes of one real node of one local cluster."""

    def __init__(
        self,
        layout: ClusterLayout,
        binaries: RealNodeBinaries,
        pause: Path,
        address: str,
        namespace: NodeNamespace | None = None,
    ) -> None:
        """A node of the cluster in `layout`, at `address`, running `binaries` (and `pause` as sandbox image).

        Node 0 runs in this machine's namespaces; a further node in its own (`namespace`), at its address there.
        """
        # The kubelet reads relative paths in its config relative to the config file: every path here is absolute.
        layout = ClusterLayout(layout.root.resolve())
        self.layout, self.binaries, self.pause, self.namespace = layout, binaries, pause, namespace
        self.name = namespace.node if namespace is not None else REAL_NODE
        self.address = namespace.address if namespace is not None else address
        self.dir = layout.root / "nodes" / self.name
        # Socket paths are limited to 107 bytes: the kubelet root and containerd's sockets sit in the short dir. A
        # further node's kubelet sees its own root at the standard path, in its mount namespace.
        self.kubelet_root = drivers.kubelet_root(layout, REAL_NODE)
        self.runtime = containerd_socket(layout, self.name).parent
        self.cdi_dir = self.dir / "cdi"

    @property
    def containerd_socket(self) -> Path:
        """The gRPC socket of containerd (the kubelet's CRI endpoint)."""
        return containerd_socket(self.layout, self.name)

    def _in_node(self, argv: list[str]) -> list[str]:
        return self.namespace.wrap(argv) if self.namespace is not None else argv

    @property
    def cdi_spec_dirs(self) -> tuple[Path, ...]:
        """Where containerd reads CDI specs: its defaults, as on a production node, then the node's own directory.

        A chart writes static specs to /etc/cdi and its driver dynamic ones to /var/run/cdi; the reference driver
        run in pods (`driver_daemonset`) writes to the node's own directory.
        """
        return (*CONTAINERD_CDI_DIRS, self.cdi_dir)

    @property
    def bin_dir(self) -> Path:
        """The PATH directory where containerd finds `containerd-shim-runc-v2` and the runc binary by name."""
        return self.dir / "bin"

    def record_host(self) -> None:
        """Write down the host's state and arrange the supervisor's teardown; call before anything starts.

        One real node per machine: the kubelet and containerd share fixed paths and ports with any other.
        """
        others = [found for found in leftovers_on_host() if found]
        if others:
            raise BackendError(
                f"real node: another real node's traces are on this machine ({'; '.join(others[:3])}); stop the "
                "cluster that runs it (dra-conformance cluster down --state-dir ...) first"
            )
        refuse_other_kubelet()
        HostRecord.take(self.binaries.containerd_shim_runc_v2).write(host_record_path(self.layout))
        teardown = [
            sys.executable,
            "-m",
            "dra_conformance.backends.local.real_node_host",
            "teardown",
            str(self.layout.root),
        ]
        self.layout.teardown.write_text(json.dumps([teardown]))

    # --- files ------------------------------------------------------------------------------------------------

    def write_files(self, authority: CertificateAuthority, server: str) -> None:
        """Certificates, kubeconfig, containerd and kubelet configs, CNI config, and the images to import."""
        # Not the kubelet root (the standard one, on the host): the kubelet creates it, after HostRecord noted it.
        for directory in (self.dir / "pki", self.cdi_dir, self.dir / "cni", self.bin_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for name, target in (
            ("containerd-shim-runc-v2", self.binaries.containerd_shim_runc_v2),
            ("runc", self.binaries.runc),
        ):
            link = self.bin_dir / name
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        client = authority.issue(f"system:node:{self.name}", organizations=["system:nodes"])
        client.write(self.dir / "pki", "kubelet-client")
        authority.issue(self.name, dns_names=[self.name], ip_addresses=[self.address], server=True, client=False).write(
            self.dir / "pki", "kubelet-serving"
        )
        kubeconfig.write(
            self.dir / "kubelet.kubeconfig",
            kubeconfig.render(
                server,
                authority.cert_pem,
                user=f"system:node:{self.name}",
                client_cert_pem=client.cert_pem,
                client_key_pem=client.key_pem,
            ),
        )
        (self.dir / "cni" / "10-dra-conformance.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        (self.dir / "containerd.toml").write_text(self._containerd_config())
        (self.dir / "kubelet.yaml").write_text(json.dumps(self._kubelet_config(), indent=2))
        for spec in (images.pause_image(self.pause), images.busybox_image(Path("/bin/busybox"))):
            images.write_archive(spec, self.dir / "images" / f"{spec.name.replace('/', '_')}.tar")

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "dra-conformance",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni-ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _containerd_config(self) -> str:
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        return "\n".join(
            [
                "version = 3",
                f'root = "{self.dir / "containerd"}"',
                f'state = "{self.runtime / "state"}"',
                "[grpc]",
                f'  address = "{self.containerd_socket}"',
                "[ttrpc]",
                f'  address = "{self.containerd_socket}.ttrpc"',
                "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
                f'  sandbox = "{PAUSE_IMAGE}"',
                f"[{runtime}]",
                # Root here lacks CAP_SYS_RESOURCE: without this, sandbox creation fails writing oom_score_adj.
                "  restrict_oom_score_adj = true",
                "  enable_cdi = true",
                f"  cdi_spec_dirs = [{', '.join(json.dumps(str(d)) for d in self.cdi_spec_dirs)}]",
                f"[{runtime}.containerd.runtimes.runc.options]",
                f'  BinaryName = "{self.bin_dir / "runc"}"',
                f"[{runtime}.cni]",
                '  bin_dirs = ["/usr/lib/cni"]',
                f'  conf_dir = "{self.dir / "cni"}"',
                "",
            ]
        )

    def _kubelet_config(self) -> dict[str, Any]:
        pki = self.layout.pki
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "authentication": {
                "x509": {"clientCAFile": str(pki / "ca.crt")},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            "address": self.address,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": KUBELET_HEALTHZ_PORT,
            "tlsCertFile": str(self.dir / "pki" / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(self.dir / "pki" / "kubelet-serving.key"),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            # This machine's hosts run cgroup v1, which 1.37 refuses unless told otherwise.
            "failCgroupV1": False,
            "failSwapOn": False,
            "featureGates": versions.FEATURE_GATES[versions.minor()],
            "podLogsDir": str(self.dir / "pod-logs"),
            "resolvConf": "",
            # A shared CI disk is often fuller than the kubelet's defaults allow; eviction is not what is tested.
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "registerWithTaints": [dict(REAL_NODE_TAINT)],
            "seccompDefault": False,
            # A pod whose claims failed to prepare is retried on the next sync, by default a minute later; checks
            # that clear a fault, or restart a driver, wait for that retry.
            "syncFrequency": KUBELET_SYNC_FREQUENCY,
            # The kubelet computes its node status this often and posts it only when it changed: a device plugin's
            # resource reaches the Node's allocatable within a second of its registration, not ten (the default).
            "nodeStatusUpdateFrequency": KUBELET_NODE_STATUS_FREQUENCY,
            "localStorageCapacityIsolation": False,
            # Each further node's pods in cgroups apart from every other node's (node 0 keeps the default root).
            **({"cgroupRoot": self.namespace.cgroup_root} if self.namespace is not None else {}),
        }

    # --- processes --------------------------------------------------------------------------------------------

    def _path_env(self) -> dict[str, str]:
        # containerd finds its shim and runc by name, and the kubelet finds nothing else there.
        return {"PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def containerd_process(self) -> ProcessSpec:
        """containerd, with the node's bin dir first on PATH (it finds its shim and runc by name)."""
        name = process_name("containerd", self.name)
        return ProcessSpec(
            name,
            self._in_node([str(self.binaries.containerd), "--config", str(self.dir / "containerd.toml")]),
            str(self.layout.component_log(name)),
            critical=False,
            env=self._path_env(),
        )

    def kubelet_process(self) -> ProcessSpec:
        """The kubelet of the node."""
        name = process_name("kubelet", self.name)
        return ProcessSpec(
            name,
            self._in_node(
                [
                    str(self.binaries.kubelet),
                    f"--config={self.dir / 'kubelet.yaml'}",
                    f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
                    f"--root-dir={self.kubelet_root}",
                    f"--hostname-override={self.name}",
                    f"--node-ip={self.address}",
                    "--v=2",
                ]
            ),
            str(self.layout.component_log(name)),
            critical=False,
            env=self._path_env(),
        )

    def api_relay_process(self, port: int) -> ProcessSpec:
        """For a further node: the API server's port on its loopback, relayed to the host's (`api_relay`)."""
        assert self.namespace is not None, "node 0 shares the host's loopback"
        name = process_name("api-relay", self.name)
        return ProcessSpec(
            name,
            [sys.executable, "-m", api_relay.__name__, str(self.namespace.netns_path), str(port)],
            str(self.layout.component_log(name)),
            critical=False,
        )

    def device_plugin_process(self) -> ProcessSpec:
        """The reference device plugin, advertising DEVICE_PLUGIN_DEVICES of DEVICE_PLUGIN_RESOURCE to the kubelet."""
        return ProcessSpec(
            "device-plugin",
            [
                sys.executable,
                "-m",
                device_plugin.__name__,
                f"--resource={DEVICE_PLUGIN_RESOURCE}",
                f"--devices={DEVICE_PLUGIN_DEVICES}",
                f"--plugin-dir={DEVICE_PLUGIN_DIR}",
                f"--socket={DEVICE_PLUGIN_SOCKET}",
            ],
            str(self.layout.component_log("device-plugin")),
            critical=False,
        )

    def import_images(self, vendor: tuple[Path, ...] = ()) -> None:
        """Load the pause and workload images, then the driver's `vendor` archives, into containerd's `k8s.io`."""
        import_archives(self.binaries.ctr, self.containerd_socket, tuple(sorted((self.dir / "images").glob("*.tar"))))
        import_archives(self.binaries.ctr, self.containerd_socket, vendor, VENDOR_IMPORT_TIMEOUT)


def import_archives(ctr: Path, socket: Path, archives: tuple[Path, ...], timeout: float = IMPORT_TIMEOUT) -> None:
    """`ctr images import` each of `archives` into the `k8s.io` namespace of the containerd at `socket`."""
    for archive in archives:
        command = [str(ctr), f"--address={socket}", "--namespace=k8s.io", "images", "import", str(archive)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise BackendError(f"real node: import {archive.name}: {' '.join(result.stderr.split())}")


# --- teardown ---------------------------------------------------------------------------------------------------


def _kubepods_cgroups(further: tuple[NodeNamespace, ...] = ()) -> list[Path]:
    """Every cgroup under `kubepods` in every hierarchy (and below the `further` nodes' cgroup roots), deepest first."""
    tops = [CGROUP_ROOT / KUBEPODS]  # cgroup v2: one hierarchy
    if CGROUP_ROOT.is_dir():
        tops += [hierarchy / KUBEPODS for hierarchy in CGROUP_ROOT.iterdir() if hierarchy.name != KUBEPODS]
    tops += [
        hierarchy / node.cgroup_root.lstrip("/") / KUBEPODS
        for node in further
        for hierarchy in node_namespace.cgroup_hierarchies()
    ]
    found = {Path(path) for top in tops if top.is_dir() for path, _, _ in os.walk(top)}
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _pids_in(cgroups: list[Path]) -> set[int]:
    pids: set[int] = set()
    for cgroup in cgroups:
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(line) for line in (cgroup / "cgroup.procs").read_text().split()}
    return pids


def _processes_of(executable: str) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "exe") == executable:
                    found.add(int(entry.name))
    return found


def _mounts_under(roots: list[Path]) -> list[str]:
    """Mount points at or under `roots`, deepest first (from /proc/self/mountinfo)."""
    prefixes = [str(root.resolve()) for root in roots]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == prefix or point.startswith(prefix + "/") for prefix in prefixes):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _unmount(point: str) -> None:
    # umount(8) rather than a syscall binding: util-linux is on every machine this runs on.
    if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _node_processes(record: HostRecord, further: tuple[NodeNamespace, ...]) -> set[int]:
    return _pids_in(_kubepods_cgroups(further)) | _processes_of(record.containerd_shim)


def _kill_node_processes(record: HostRecord, further: tuple[NodeNamespace, ...]) -> None:
    """SIGKILL the nodes' processes and wait until they are gone: a cgroup is busy while a member still exits."""
    for pid in _node_processes(record, further):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(WaitTimeout):  # whatever is left shows up below as a cgroup that cannot be removed
        waits.until(
            lambda: _node_processes(record, further),
            lambda pids: not pids,
            timeout=KILLED_PROCESSES_EXIT_TIMEOUT,
            what="the real node's killed processes exited",
        )


def _remove_kubepods_cgroups(further: tuple[NodeNamespace, ...]) -> list[str]:
    """Remove every kubepods cgroup, deepest first; retried while the kernel still releases an emptied one (EBUSY)."""
    errors: dict[Path, str] = {}

    def remove_all() -> list[Path]:
        errors.clear()
        for cgroup in _kubepods_cgroups(further):
            try:
                cgroup.rmdir()
            except FileNotFoundError:
                pass
            except OSError as error:
                errors[cgroup] = error.strerror or str(error)
        return _kubepods_cgroups(further)

    with contextlib.suppress(WaitTimeout):
        waits.until(remove_all, lambda left: not left, timeout=CGROUP_RELEASE_TIMEOUT, what="kubepods cgroups removed")
    return [f"cgroup {cgroup}: {errors.get(cgroup, 'still present')}" for cgroup in _kubepods_cgroups(further)]


def teardown(layout: ClusterLayout) -> list[str]:
    """Undo what the real node did to the host; idempotent. Returns what could not be undone."""
    record = HostRecord.read(host_record_path(layout))
    if record is None:
        return []
    installed = install_record.InstallRecord.read(install_record.record_path(layout))
    further = tuple(node_namespace.read_records(layout.root.resolve()))
    problems: list[str] = []
    _kill_node_processes(record, further)
    new_netns = [NETNS_DIR / name for name in (os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else [])]
    new_netns = [path for path in new_netns if path.name not in record.netns and path.name.startswith("cni-")]
    roots = [drivers.runtime_dir(layout), layout.root / "nodes" / REAL_NODE, STANDARD_KUBELET_ROOT]
    roots += map(Path, record.absent_paths)
    # What the vendor's pods mounted and the kubelet created for them (a Bidirectional mount may have propagated).
    roots += install_record.removable(installed, layout.root) if installed is not None else []
    for point in [*_mounts_under(roots), *map(str, new_netns)]:
        _unmount(point)
    for path in new_netns:
        path.unlink(missing_ok=True)
    problems += _remove_kubepods_cgroups(further)
    # The further nodes' namespaces, and with them every mount their kubelets and containerds made there.
    for node in further:
        problems += node.remove()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    for name, value in record.sysctls.items():
        try:
            _sysctl_path(name).write_text(value)
        except OSError as error:
            problems.append(f"sysctl {name}={value}: {error.strerror}")
    # A killed device plugin leaves its socket (a clean stop removes it); where the directory was there before.
    (DEVICE_PLUGIN_DIR / DEVICE_PLUGIN_SOCKET).unlink(missing_ok=True)
    for path in map(Path, record.absent_paths):
        if path.is_dir() and not path.is_symlink():
            subprocess.run(["rm", "-rf", *SAFE_RM, str(path)], capture_output=True, check=False)
        else:
            path.unlink(missing_ok=True)
    for root, before in record.entries.items():
        if Path(root).is_dir():
            problems += remove_new_entries(Path(root), before)
    # The host paths the vendor's manifests mount that did not exist before the install (none without an install).
    problems += install_record.restore(installed, layout.root) if installed is not None else []
    if not problems:
        install_record.record_path(layout).unlink(missing_ok=True)
        node_namespace.records_path(layout.root.resolve()).unlink(missing_ok=True)
        host_record_path(layout).unlink(missing_ok=True)
    return problems


def leftovers_on_host() -> list[str]:
    """Traces of any real node on this machine: kubepods cgroups, the CNI bridge."""
    found = [f"cgroup {path}" for path in _kubepods_cgroups()]
    found += [
        f"cgroup {path}"
        for hierarchy in node_namespace.cgroup_hierarchies()
        for path in hierarchy.glob(f"{node_namespace.CGROUP_PREFIX}*")
    ]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"network device {BRIDGE}")
    return found


def leftovers(layout: ClusterLayout) -> list[str]:
    """What of the node is still on the host (empty after a clean teardown)."""
    record = HostRecord.read(host_record_path(layout))
    found = leftovers_on_host()
    found += [left for node in node_namespace.read_records(layout.root.resolve()) for left in node.leftovers()]
    node_dirs = [drivers.runtime_dir(layout), layout.root / "nodes", STANDARD_KUBELET_ROOT]
    found += [f"mount {point}" for point in _mounts_under(node_dirs)]
    if record is not None:
        found += [
            f"path {path} (not in {root} before the node started)"
            for root, before in record.entries.items()
            if Path(root).is_dir()
            for path in new_entries(Path(root), before)
        ]
        found += [f"process {pid} ({record.containerd_shim})" for pid in _processes_of(record.containerd_shim)]
        found += [f"path {path}" for path in record.absent_paths if os.path.lexists(path)]
        installed = install_record.InstallRecord.read(install_record.record_path(layout))
        found += install_record.leftovers(installed) if installed is not None else []
        if os.path.lexists(DEVICE_PLUGIN_DIR / DEVICE_PLUGIN_SOCKET):
            found.append(f"device plugin socket {DEVICE_PLUGIN_DIR / DEVICE_PLUGIN_SOCKET}")
        found += [
            f"sysctl {name}={_sysctl_path(name).read_text().strip()} (was {value})"
            for name, value in record.sysctls.items()
            if _sysctl_path(name).read_text().strip() != value
        ]
    return found


def main(argv: list[str]) -> int:
    """`python -m dra_conformance.backends.local.real_node_host teardown <state-dir>` (the supervisor's hook)."""
    if len(argv) != 3 or argv[1] != "teardown":
        print("usage: python -m dra_conformance.backends.local.real_node_host teardown <state-dir>", file=sys.stderr)
        return 2
    problems = teardown(ClusterLayout(Path(argv[2])))
    for problem in problems:
        print(f"real node teardown: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""A node agent: a pod on a real node that reads the node's files for checks on a cluster the suite did not build.

On a cluster we did not start, nobody tells the suite where a node keeps its kubelet root or its CDI specs. The
agent finds out the way an operator would: with the host's PID namespace and its root file system mounted
read-only, it reads the kubelet's and containerd's command lines, the kubelet it runs under (its own pod
directory exists under that kubelet's root), and containerd's `cdi_spec_dirs`. It also answers whether the node's
file system is this machine's: it writes a token into its own emptyDir and the suite looks for that file under the
discovered kubelet root. Only then do socket-level checks (the fault interposer, the reference driver's fault
switch) have the driver's sockets within reach.

The agent never writes to the node outside its own emptyDir and never signals a process.
"""

from __future__ import annotations

import secrets
import shlex
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from kubernetes import client
from kubernetes.stream import portforward, stream

from dra_conformance.errors import BackendError
from dra_conformance.kube import waits
from dra_conformance.kube.builders import TEST_POD_GRACE_SECONDS, Manifest, pin_to_node
from dra_conformance.kube.client import sibling_client
from dra_conformance.kube.pods import describe_pod, pod_ready, start_failure

# Where the agent sees the node's root file system.
HOST = PurePosixPath("/host")
# The agent's own scratch volume: the one place it writes.
SCRATCH = PurePosixPath("/scratch")
SCRATCH_VOLUME = "scratch"
# Defaults when a process names no flag: kubelet --root-dir, containerd --config, and containerd's CDI spec dirs.
DEFAULT_KUBELET_ROOT = PurePosixPath("/var/lib/kubelet")
DEFAULT_CONTAINERD_CONFIG = PurePosixPath("/etc/containerd/config.toml")
DEFAULT_CDI_DIRS = (PurePosixPath("/etc/cdi"), PurePosixPath("/var/run/cdi"))
# Prints one line per process whose command line names kubelet or containerd: "<pid> <args separated by \x1f>".
LIST_PROCESSES = r"""
for p in /proc/[0-9]*; do
  a=$(tr '\000' '\037' < "$p/cmdline" 2>/dev/null) || continue
  case "$a" in *kubelet*|*containerd*) printf '%s %s\n' "${p#/proc/}" "$a";; esac
done
"""
ARG_SEPARATOR = "\x1f"
# A spec file the CDI reader considers (the CDI spec's own extensions).
CDI_SUFFIXES = (".json", ".yaml", ".yml")
# Bytes per stdin frame of an upload: well under the API server's and kubelet's websocket frame limits.
UPLOAD_CHUNK = 256 * 1024


@dataclass(frozen=True)
class NodeLayout:
    """Where a node keeps what kubelet-mode checks look at, as its agent found it."""

    node: str
    kubelet_root: PurePosixPath
    cdi_dirs: tuple[PurePosixPath, ...]
    # Whether the node's file system is this machine's (the agent's token was found here).
    shares_this_machine: bool


def agent_pod(name: str, namespace: str, node: str, image: str, tolerations: tuple[Manifest, ...]) -> Manifest:
    """The agent's pod: host PID namespace, the host's root read-only at /host, an emptyDir at /scratch."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "dra-node-agent"}},
        "spec": {
            "hostPID": True,
            "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
            "affinity": pin_to_node(node),
            "tolerations": list(tolerations),
            "containers": [
                {
                    "name": "agent",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "exec sleep 86400"],
                    "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                    "volumeMounts": [
                        {"name": "host", "mountPath": str(HOST), "readOnly": True},
                        {"name": SCRATCH_VOLUME, "mountPath": str(SCRATCH)},
                    ],
                }
            ],
            "volumes": [
                {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
                {"name": SCRATCH_VOLUME, "emptyDir": {}},
            ],
        },
    }


@dataclass(frozen=True)
class Process:
    """A process on the node, by its command line."""

    pid: int
    args: tuple[str, ...]

    def named(self, program: str) -> bool:
        """Whether the process runs `program` (argv[0], or argv[1] of a multi-call binary)."""
        return any(PurePosixPath(arg).name == program for arg in self.args[:2])

    def flag(self, *names: str) -> str | None:
        """The value of the first of `names` given as `--name=value` or `--name value`."""
        for index, arg in enumerate(self.args):
            for name in names:
                if arg.startswith(f"{name}="):
                    return arg.split("=", 1)[1]
                if arg == name and index + 1 < len(self.args):
                    return self.args[index + 1]
        return None


def parse_processes(listing: str) -> list[Process]:
    """Processes from the agent's LIST_PROCESSES output."""
    processes = []
    for line in listing.splitlines():
        pid, _, joined = line.partition(" ")
        if pid.isdigit() and joined:
            processes.append(Process(int(pid), tuple(a for a in joined.split(ARG_SEPARATOR) if a)))
    return processes


def cdi_dirs_of(config_text: str | None) -> tuple[PurePosixPath, ...]:
    """The CDI spec dirs from its TOML config (version 2 or 3); the defaults where it names none."""
    if not config_text:
        return DEFAULT_CDI_DIRS
    try:
        config = tomllib.loads(config_text)
    except tomllib.TOMLDecodeError:
        return DEFAULT_CDI_DIRS
    plugins = config.get("plugins") or {}
    for key in ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"):
        dirs = (plugins.get(key) or {}).get("cdi_spec_dirs")
        if dirs:
            return tuple(PurePosixPath(d) for d in dirs)
    return DEFAULT_CDI_DIRS


def runtime_endpoint_of(kubelet: Process, kubelet_config_text: str | None) -> str | None:
    """The kubelet's container runtime socket path (flag, else its config file's containerRuntimeEndpoint)."""
    endpoint = kubelet.flag("--container-runtime-endpoint")
    if endpoint is None and kubelet_config_text:
        loaded = yaml.safe_load(kubelet_config_text) or {}
        endpoint = loaded.get("containerRuntimeEndpoint") if isinstance(loaded, dict) else None
    return endpoint.removeprefix("unix://") if endpoint else None


def grpc_address_of(config_text: str | None) -> str:
    """The containerd socket path from its config (its default where the config names none)."""
    default = "/run/containerd/containerd.sock"
    if not config_text:
        return default
    try:
        return str((tomllib.loads(config_text).get("grpc") or {}).get("address") or default)
    except tomllib.TOMLDecodeError:
        return default


class NodeAgent:
    """A running agent pod on one node; reads node files through exec."""

    def __init__(self, api_client: client.ApiClient, namespace: str, pod: str, node: str) -> None:
        """Talk to agent pod `pod` in `namespace` on `node`.

        Exec swaps the client's request function while it streams, so the agent has an ApiClient of its own.
        """
        self.core = client.CoreV1Api(sibling_client(api_client))
        self.namespace, self.pod, self.node = namespace, pod, node
        # The client's stream() swaps the ApiClient's request function while it connects: one stream at a time.
        self._streams = threading.Lock()

    def await_ready(self, timeout: float) -> None:
        """Wait until the agent's container runs; an image the node cannot pull ends the wait at once."""
        pod = waits.until(
            lambda: self.core.read_namespaced_pod(self.pod, self.namespace),
            lambda p: pod_ready(p) or start_failure(p) is not None,
            timeout=timeout,
            what=f"node agent {self.namespace}/{self.pod} Ready on {self.node}",
            describe=describe_pod,
        )
        failure = start_failure(pod)
        if failure is not None:
            image = pod.spec.containers[0].image
            raise BackendError(
                f"node agent on {self.node} cannot start image {image} ({failure}); "
                "--dra-workload-image names an image with a shell that the node has or can pull"
            )

    def _exec(self, script: str, **options: Any) -> Any:
        """Run `script` by the agent's shell through the client's exec stream (`options` go to `stream`)."""
        with self._streams:
            return stream(
                self.core.connect_get_namespaced_pod_exec,
                self.pod,
                self.namespace,
                command=["sh", "-c", script],
                stdout=True,
                tty=False,
                **options,
            )

    def sh(self, script: str) -> str:
        """Standard output of `script` run by the agent's shell."""
        return str(self._exec(script, stderr=False, stdin=False))

    def upload(self, data: bytes, path: PurePosixPath, timeout: float) -> None:
        """Write `data` to `path` in the agent's scratch volume, executable; a failed write is a BackendError."""
        if not path.is_relative_to(SCRATCH):
            raise ValueError(f"the agent writes only under {SCRATCH}, not {path}")
        partial = shlex.quote(f"{path}.partial")
        # `head -c` reads exactly the bytes sent, so the upload needs no end-of-input signal on stdin.
        target = shlex.quote(str(path))
        script = f"head -c {len(data)} > {partial} && chmod 0755 {partial} && mv {partial} {target} && echo uploaded"
        session = self._exec(script, stderr=True, stdin=True, binary=True, _preload_content=False)
        try:
            for start in range(0, len(data), UPLOAD_CHUNK):
                session.write_stdin(data[start : start + UPLOAD_CHUNK])
            session.run_forever(timeout=timeout)
            output = session.read_all()
        finally:
            session.close()
        if b"uploaded" not in output:
            said = output.decode(errors="replace").strip() or "nothing"
            raise BackendError(f"node agent on {self.node}: writing {path} failed (the agent said: {said})")

    def port_forward(self, port: int) -> Any:
        """A socket connected, through a port-forward, to `port` on the agent pod's loopback."""
        with self._streams:
            forward = portforward(
                self.core.connect_get_namespaced_pod_portforward, self.pod, self.namespace, ports=str(port)
            )
        return forward.socket(port)

    def sockets_under(self, root: PurePosixPath, directories: tuple[str, ...]) -> dict[PurePosixPath, int]:
        """Unix sockets in `directories` (under the node directory `root`, three levels deep), with modify times.

        Keyed by path on the node; times in seconds since the epoch.
        """
        quoted = shlex.quote(str(HOST / root.relative_to("/")))
        names = " ".join(shlex.quote(d) for d in directories)
        listing = self.sh(
            f"cd {quoted} 2>/dev/null && find {names} -maxdepth 3 -type s 2>/dev/null | "
            'while read -r f; do echo "$(stat -c %Y "$f") $f"; done'
        )
        sockets = {}
        for line in listing.splitlines():
            modified, _, name = line.partition(" ")
            if modified.isdigit() and name:
                sockets[root / name] = int(modified)
        return sockets

    def read_host_file(self, path: PurePosixPath) -> str | None:
        """A node file's text, or None where it does not exist or cannot be read."""
        marker = secrets.token_hex(8)
        quoted = shlex.quote(str(HOST / path.relative_to("/")))
        text = self.sh(f"cat {quoted} 2>/dev/null && echo {marker}")
        return text[: -len(marker) - 1] if text.endswith(f"{marker}\n") else None

    def host_text_files(self, directory: PurePosixPath, suffixes: tuple[str, ...]) -> dict[str, str]:
        """Regular files of a node directory with one of `suffixes`, by name (an absent directory has none)."""
        quoted = shlex.quote(str(HOST / directory.relative_to("/")))
        names = self.sh(f'cd {quoted} 2>/dev/null && for f in *; do [ -f "$f" ] && echo "$f"; done').split()
        files = {}
        for name in names:
            if name.endswith(suffixes):
                text = self.read_host_file(directory / name)
                if text is not None:
                    files[name] = text
        return files

    def layout(self) -> NodeLayout:
        """Discover the node's kubelet root and CDI dirs, and whether its file system is this machine's."""
        uid = self.sh('printf %s "$POD_UID"').strip()
        processes = parse_processes(self.sh(LIST_PROCESSES))
        kubelets = [p for p in processes if p.named("kubelet")]
        # The kubelet running this pod keeps the pod's directory under its root.
        roots = [PurePosixPath(k.flag("--root-dir") or DEFAULT_KUBELET_ROOT) for k in kubelets]
        mine = [(k, r) for k, r in zip(kubelets, roots, strict=True) if self._host_dir_exists(r / "pods" / uid)]
        kubelet, root = mine[0] if mine else (None, DEFAULT_KUBELET_ROOT)
        cdi_dirs = self._cdi_dirs(kubelet, [p for p in processes if p.named("containerd")])
        return NodeLayout(self.node, root, cdi_dirs, self._shares_this_machine(root, uid))

    def _host_dir_exists(self, path: PurePosixPath) -> bool:
        quoted = shlex.quote(str(HOST / path.relative_to("/")))
        return self.sh(f"[ -d {quoted} ] && echo yes").strip() == "yes"

    def _cdi_dirs(self, kubelet: Process | None, containerds: list[Process]) -> tuple[PurePosixPath, ...]:
        """The CDI dirs of the containerd serving the kubelet (matched by socket when several run)."""
        configs = {}
        for containerd in containerds:
            path = PurePosixPath(containerd.flag("--config", "-c") or DEFAULT_CONTAINERD_CONFIG)
            configs[containerd.pid] = self.read_host_file(path)
        if not configs:
            return DEFAULT_CDI_DIRS
        if len(configs) > 1 and kubelet is not None:
            config_path = kubelet.flag("--config")
            kubelet_config = self.read_host_file(PurePosixPath(config_path)) if config_path else None
            socket = runtime_endpoint_of(kubelet, kubelet_config)
            matching = [text for text in configs.values() if grpc_address_of(text) == socket]
            if matching:
                return cdi_dirs_of(matching[0])
        return cdi_dirs_of(next(iter(configs.values())))

    def _shares_this_machine(self, root: PurePosixPath, uid: str) -> bool:
        token = secrets.token_hex(16)
        self.sh(f"echo {token} > {SCRATCH}/token")
        local = Path(root) / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / SCRATCH_VOLUME / "token"
        try:
            return local.read_text().strip() == token
        except OSError:
            return False


class NodeAgents:
    """One agent per node for a worker's session, in a namespace of its own, made on first use."""

    def __init__(self, api_client: client.ApiClient, make_namespace: Callable[[], str], ready_timeout: float) -> None:
        """Create agents through `api_client`; `make_namespace` creates (once) and names the agents' namespace."""
        self.api_client, self.make_namespace, self.ready_timeout = api_client, make_namespace, ready_timeout
        self.namespace: str | None = None
        self._agents: dict[str, tuple[NodeAgent, NodeLayout]] = {}
        # A node whose agent could not start stays that way for the session: one wait, then the same error.
        self._failures: dict[str, BackendError] = {}

    def on(self, node: str, image: str, tolerations: tuple[Manifest, ...]) -> tuple[NodeAgent, NodeLayout]:
        """The agent on `node` and the node's layout as it found it."""
        if node in self._failures:
            raise self._failures[node]
        if node not in self._agents:
            if self.namespace is None:
                self.namespace = self.make_namespace()
            name = f"agent-{secrets.token_hex(4)}"
            core = client.CoreV1Api(self.api_client)
            core.create_namespaced_pod(self.namespace, agent_pod(name, self.namespace, node, image, tolerations))
            agent = NodeAgent(self.api_client, self.namespace, name, node)
            try:
                agent.await_ready(self.ready_timeout)
            except BackendError as error:
                self._failures[node] = error
                raise
            self._agents[node] = (agent, agent.layout())
        return self._agents[node]

"""Where a local cluster keeps its files: one state directory per cluster under `reports/clusters/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The local cluster's real node, and the standard paths it uses on this machine: its kubelet root is the one vendors'
# DaemonSets mount (hostPath /var/lib/kubelet/plugins_registry, /var/lib/kubelet/plugins/<driver>), and its
# containerd reads CDI specs from the standard directories too, as containerd's defaults do. `real_node.HostRecord`
# restores them after the run.
REAL_NODE = "real-node-0"
STANDARD_KUBELET_ROOT = Path("/var/lib/kubelet")
# Where drivers write CDI specs as they prepare claims (the CDI package's dynamic directory).
STANDARD_CDI_DIR = Path("/var/run/cdi")
# Where charts and node set-up write static CDI specs (the CDI package's static directory).
STATIC_CDI_DIR = Path("/etc/cdi")
# containerd's own `cdi_spec_dirs` default (its CRI runtime config): static first, so dynamic specs take precedence.
CONTAINERD_CDI_DIRS = (STATIC_CDI_DIR, STANDARD_CDI_DIR)


@dataclass(frozen=True)
class ClusterLayout:
    """Paths inside a local cluster's state directory."""

    root: Path

    @property
    def pki(self) -> Path:
        """Certificates and keys (regenerated on every `up`)."""
        return self.root / "pki"

    @property
    def config(self) -> Path:
        """Component kubeconfigs and config files."""
        return self.root / "config"

    @property
    def logs(self) -> Path:
        """One log per component, the audit log and the supervisor log."""
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        """Etcd's data directory (wiped on every `up`, so each cluster starts empty)."""
        return self.root / "etcd-data"

    @property
    def plan(self) -> Path:
        """What the supervisor runs, written by the backend before it spawns the supervisor."""
        return self.root / "plan.json"

    @property
    def state(self) -> Path:
        """What the supervisor reports: its pid, component pids, phase, and why it stopped."""
        return self.root / "state.json"

    @property
    def extra_processes(self) -> Path:
        """Processes added to a running cluster (the DRA drivers); the supervisor reads it on SIGUSR1."""
        return self.root / "extra-processes.json"

    @property
    def owners(self) -> Path:
        """The runs holding the cluster (see owners.py); read and written under `lock`."""
        return self.root / "owners.json"

    @property
    def teardown(self) -> Path:
        """Commands the supervisor runs after its children stopped (the real node's host clean-up)."""
        return self.root / "teardown.json"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users and tests connect with."""
        return self.root / "kubeconfig"

    @property
    def lock(self) -> Path:
        """Serializes up/down/attach between CLI calls and xdist workers."""
        return self.root.with_name(self.root.name + ".lock")

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (read by the metrics consumer inventory)."""
        return self.logs / "audit.log"

    def component_log(self, name: str) -> Path:
        """The log file of one component."""
        return self.logs / f"{name}.log"

    def serving_cert(self, component: str) -> tuple[Path, Path]:
        """A control-plane component's serving certificate and key, issued by the cluster CA at render."""
        return self.pki / f"{component}-serving.crt", self.pki / f"{component}-serving.key"

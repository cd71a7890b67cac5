"""kube-scheduler: allocates claims (the DRA plugin) and binds pods."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.backends.local.components.base import ControlPlaneContext, serving_flags
from dra_conformance.backends.local.components.kube_apiserver import KubeApiserver
from dra_conformance.backends.local.components.kube_controller_manager import component_auth
from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster


@dataclass(frozen=True)
class KubeScheduler:
    """The scheduler, started once the API server is ready."""

    name: str = "kube-scheduler"
    # Its identity's kubeconfig in ControlPlaneContext.kubeconfigs.
    identity: str = "scheduler"

    def command(self, context: ControlPlaneContext) -> list[ProcessSpec]:
        """kube-scheduler with the DRA feature gates."""
        argv = [
            str(context.binaries.kube),
            "scheduler",
            *component_auth(context, self.identity),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={context.ports.scheduler}",
            *serving_flags(context, self.name),
            "--leader-elect=false",
            f"--feature-gates={context.feature_gates}",
            "--profiling=false",
            "--v=1",
        ]
        if context.scheduler_qps is not None:
            # Deprecated flags, still honoured while no --config file is given (cmd/kube-scheduler options).
            argv += [f"--kube-api-qps={context.scheduler_qps}", f"--kube-api-burst={context.scheduler_qps}"]
        log = str(context.layout.component_log(self.name))
        return [ProcessSpec(self.name, argv, log, wait_for=KubeApiserver.ready_url(context))]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Nothing to wait for at start: it shows it works by scheduling pods, which the suites check."""

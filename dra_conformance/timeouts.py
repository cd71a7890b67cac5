"""Named deadlines, in seconds, each with the reason for its size.

A `Timeouts` instance travels as a fixture; users override a field with `--dra-timeout-<name with dashes>=<seconds>`
(e.g. `--dra-timeout-pod-scheduled=120` for `pod_scheduled`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Timeouts:
    """Per-operation deadlines (seconds)."""

    # etcd answers its health endpoint well under a second on loopback; 30 s covers a cold page cache on a busy CI box.
    etcd_ready: float = 30.0
    # kube-apiserver runs ~40 post-start hooks (RBAC bootstrap, priority classes); 3-6 s on 2 cores, 60 s when loaded.
    apiserver_ready: float = 60.0
    # kwok marks a node Ready in its first stage pass, normally well under a second after the Node exists.
    node_ready: float = 30.0
    # A fake driver process imports grpc and the API client (~1 s) and publishes its slice before it answers; two
    # clusters' drivers starting on 2 loaded cores (load average 10) were seen to need more than 30 s.
    driver_ready: float = 60.0
    # The aggregator's availability controller probes a new APIService at once and retries with a short backoff.
    metrics_available: float = 60.0
    # A Metrics API implementation has its first samples after its first scrapes: metrics-server needs two, 15 s apart.
    metrics_first_sample: float = 90.0
    # Default ServiceAccount and RBAC bootstrap in a new namespace come from controllers with a resync of seconds.
    namespace_ready: float = 30.0
    # The scheduler retries an unschedulable pod with backoff up to 10 s; allocation + binding take a few backoffs.
    pod_scheduled: float = 60.0
    # kwok applies its pod-ready stage on its next pass after the pod changes, well under a second.
    pod_ready: float = 30.0
    # A driver that declares status.devices writes it during or soon after prepare (one API round trip, retried on
    # conflicts); other components may write it later, so this is a wait, not a check at return.
    status_written: float = 30.0
    # The resourceclaim controller creates a template claim within one sync; it shares CPU with the scheduler.
    claim_generated: float = 30.0
    # Deletion waits for finalizers (delete-protection, pod GC by kwok's pod-delete stage) to be removed.
    delete: float = 60.0
    # On a real kubelet: sandbox, CNI, the driver's prepare and the container start take 1-3 s; 60 s covers a busy CI
    # box and an image already on the node (nothing is pulled on the local cluster).
    pod_running: float = 60.0
    # A Job's one pod runs and exits on a real kubelet, then the job controller syncs within a second.
    job_complete: float = 90.0
    # The kubelet copies a device's health into the pod's status (allocatedResourcesStatus) on the pod's next status
    # sync, which a health change from the driver's stream triggers; 60 s covers a kubelet busy on 2 cores.
    pod_health: float = 60.0
    # A leased node is held for one check: on fake nodes the longest, a driver restart behind a faulty API, takes
    # about a minute; the real node's kubelet-mode checks (a kubelet restart with claims in use, a rolling update)
    # hold it for minutes on 2 cores, and on a cluster the suite did not build scenario runs queue behind them there.
    node_lease: float = 300.0
    # The csrsigning controller signs an approved CSR within one sync, well under a second; 60 s covers a
    # controller-manager busy on 2 cores. A cluster with no signer for the request runs into it.
    node_certificate: float = 60.0
    # The device-taint eviction controller writes a rule's condition from its informer events, within a second of a
    # change; 30 s covers a controller-manager busy on 2 cores.
    taint_observed: float = 30.0
    # NoExecute: the controller deletes a non-tolerating pod as soon as it sees the taint (after tolerationSeconds,
    # where given); the node then finishes the deletion. 60 s covers both on a busy machine.
    eviction: float = 60.0
    # Graceful stop of one control-plane process before it is killed: etcd flushes, apiserver drains watches.
    process_stop: float = 15.0
    # A reference driver instance stops its gRPC servers (5 s grace for calls in flight), then lists and deletes its
    # slices (10 s per request at most); 30 s covers that on a loaded API server before the harness kills it.
    driver_stop: float = 30.0
    # A cold build of the Kubernetes binaries from source takes 10-30 min on 2 cores; this guards a hung toolchain.
    build: float = 3600.0

    def override(self, **values: float) -> Timeouts:
        """Return a copy with some deadlines replaced; unknown names are a usage error."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown timeout(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **values)

    @classmethod
    def names(cls) -> list[str]:
        """Return the names of every deadline, for option registration."""
        return [f.name for f in fields(cls)]


def timeout_option(name: str) -> str:
    """The option that overrides the deadline `name`, for the plugin and `cluster up` alike: `--dra-timeout-<name>`."""
    return "--dra-timeout-" + name.replace("_", "-")

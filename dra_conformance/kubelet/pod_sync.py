"""How soon a real kubelet writes a pod's status again without being asked: its pod sync period.

A pod worker syncs each running pod again after `syncFrequency` (KubeletConfiguration; 1 min by default,
k8s.io/kubernetes v1.37.2 pkg/kubelet/apis/config/v1beta1/defaults.go), jittered up to half as much again
(pkg/kubelet/pod_workers.go, workerResyncIntervalJitterFactor); each sync computes the pod's status afresh, device
health included, and the status manager posts a change at once (and re-posts what failed every 10 s,
pkg/kubelet/status/status_manager.go syncPeriod). A change nothing announces to the pod's worker (the kubelet
forgetting a stopped driver's device health) reaches the pod's status within that window. The kubelet's own
configuration is read through the API server's node proxy (`/configz`); where it cannot be, the default applies.
"""

from __future__ import annotations

import json
import re

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# KubeletConfiguration's default syncFrequency (pkg/kubelet/apis/config/v1beta1/defaults.go).
DEFAULT_SYNC_FREQUENCY = 60.0
# A pod worker waits up to (1 + this) x syncFrequency before it syncs a pod again (workerResyncIntervalJitterFactor).
RESYNC_JITTER = 0.5
# The status manager posts a changed status at once and retries every 10 s (status_manager.go syncPeriod); a
# second period more covers a kubelet and API server busy on 2 cores.
STATUS_POSTED = 20.0
# One read of /configz through the API server: the kubelet answers at once; ten seconds bound a hung one.
READ_TIMEOUT = 10.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_seconds(text: str) -> float | None:
    """Seconds of a Go duration string ("1m0s", "10s", "1.5h"); None where `text` is not one."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def sync_frequency(api_client: client.ApiClient, node: str) -> tuple[float, str]:
    """The kubelet's syncFrequency on `node` in seconds, and where it comes from (its /configz, or the default)."""
    try:
        response = client.CoreV1Api(api_client).connect_get_node_proxy_with_path(
            node, "configz", _preload_content=False, _request_timeout=READ_TIMEOUT
        )
        config = json.loads(response.data).get("kubeletconfig") or {}
    except (ApiException, OSError, ValueError) as error:
        return DEFAULT_SYNC_FREQUENCY, f"the default {DEFAULT_SYNC_FREQUENCY:g}s (/configz of {node}: {error})"
    raw = config.get("syncFrequency")
    seconds = go_duration_seconds(raw) if isinstance(raw, str) else None
    if seconds is None or seconds <= 0:
        return DEFAULT_SYNC_FREQUENCY, f"the default {DEFAULT_SYNC_FREQUENCY:g}s (/configz of {node}: {raw!r})"
    return seconds, f"syncFrequency {raw} (/configz of {node})"


def unannounced_status_window(sync_seconds: float) -> float:
    """Seconds within which a status change nothing announced reaches a running pod's status: its next sync."""
    return sync_seconds * (1.0 + RESYNC_JITTER) + STATUS_POSTED

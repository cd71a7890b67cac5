"""Sonobuoy's generated manifest, changed to run where pods reach the API server only through their node's network.

On the local cluster the API server listens on the host's loopback and pods have no Service path to it (no
kube-proxy); see kube/host_access.py. `sonobuoy run --plugin` gives no way to put the aggregator on the host's
network, and `sonobuoy run --file` accepts no other flag (neither `--wait` nor `--skip-preflight`, and its DNS
preflight check fails on a cluster without cluster DNS: `cmd/sonobuoy/app/run.go` allowedGenFlagsWithRunFile). So
there the manifest `sonobuoy gen --plugin ...` writes is changed here and applied as it is, then `sonobuoy wait`,
`retrieve` and `results` read the run as after `sonobuoy run`. Changed, and nothing else:

- the aggregator pod (label `sonobuoy-component: aggregator`): the host's network, the API server's address in the
  in-cluster variables, and the nodes it may run on (tolerating their NoSchedule taints);
- Sonobuoy's config (ConfigMap `sonobuoy-config-cm`, `config.json`): the port the aggregator binds (on the host's
  network, 8080 may be taken) and the port its workers serve progress updates on.

The plugin's own pod gets the same from `dra-conformance sonobuoy-plugin --api-server-from-host URL --node NAME`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from dra_conformance.errors import UsageError
from dra_conformance.kube import host_access

AGGREGATOR_LABEL = ("sonobuoy-component", "aggregator")
CONFIG_MAP = "sonobuoy-config-cm"
CONFIG_KEY = "config.json"


def _is_aggregator(document: dict[str, Any]) -> bool:
    labels = (document.get("metadata") or {}).get("labels") or {}
    key, value = AGGREGATOR_LABEL
    return document.get("kind") == "Pod" and labels.get(key) == value


def _is_config(document: dict[str, Any]) -> bool:
    return document.get("kind") == "ConfigMap" and (document.get("metadata") or {}).get("name") == CONFIG_MAP


def aggregator_on_host(
    documents: list[dict[str, Any]], server: str, nodes: tuple[str, ...], bind_port: int, progress_port: int
) -> list[dict[str, Any]]:
    """`documents` (what `sonobuoy gen` wrote) with the aggregator on the host's network of `nodes`, at `server`."""
    changed = copy.deepcopy(documents)
    aggregators = [d for d in changed if _is_aggregator(d)]
    configs = [d for d in changed if _is_config(d)]
    if len(aggregators) != 1 or len(configs) != 1:
        raise UsageError(
            f"not a manifest of `sonobuoy gen`: expected one aggregator pod and one ConfigMap {CONFIG_MAP}, found "
            f"{len(aggregators)} and {len(configs)}"
        )
    pod_spec = aggregators[0]["spec"]
    host_access.reach_api_server_from_host(pod_spec, server)
    if nodes:
        host_access.require_nodes(pod_spec, nodes)
        host_access.tolerate_scheduling_taints(pod_spec)
    config = json.loads(configs[0]["data"][CONFIG_KEY])
    config["Server"]["bindport"] = bind_port
    config["ProgressUpdatesPort"] = str(progress_port)
    configs[0]["data"][CONFIG_KEY] = json.dumps(config)
    return changed

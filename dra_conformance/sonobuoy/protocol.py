"""What Sonobuoy v0.57.4 expects of a plugin, read from its Go module (github.com/vmware-tanzu/sonobuoy@v0.57.4).

- The plugin definition is one YAML document (`pkg/plugin/manifest/manifest.go`): `sonobuoy-config` (driver,
  plugin-name, result-format, result-files, description), `spec` (the plugin's container), `podSpec` (replaces
  Sonobuoy's default pod spec whole, `pkg/plugin/driver/job/job.go`) and `config-map` (file name -> content).
  `sonobuoy run --plugin FILE` decodes exactly one such document (`cmd/sonobuoy/app/pluginList.go`), so the RBAC
  the plugin's ServiceAccount needs is a manifest of its own.
- Every `config-map` entry becomes a file of ConfigMap `plugin-<name>-cm`, mounted at /tmp/sonobuoy/config in the
  plugin's containers (`pkg/client/gen.go`, `sonobuoyDefaultConfigDir`); the plugin container also gets
  SONOBUOY_RESULTS_DIR and SONOBUOY_CONFIG_DIR (`applyAutoEnvVars`).
- The worker sidecar waits for `<results dir>/done` and sends the file whose path it holds; a path ending in
  `.gz` is sent as application/gzip and the aggregator unpacks it under `plugins/<name>/results/global/`
  (`pkg/worker/worker.go` GatherResults, handleWaitFile; `pkg/plugin/aggregation/aggregator.go`
  handleArchiveResult). Without a done file the worker waits until the plugin times out (or, if every other
  container exited 0, tars the whole results directory itself).
- The worker reads its own pod through the API (`allOtherContainersCompleted`): the plugin's ServiceAccount needs
  `get pods` in Sonobuoy's namespace (the suite's rights grant it cluster-wide).
- A terminated plugin container is reported as the plugin's error only after five minutes without results
  (`pkg/plugin/driver/utils/utils.go`, terminatedContainerWindow), long after the worker sent them.
- `manual` results are one YAML item tree (name, status, meta, details, items; `pkg/client/results/item.go`,
  manual.go). `sonobuoy results` prints the leaves' statuses counted, passed, failed and skipped first, then any
  other status with its count (`cmd/sonobuoy/app/results.go` printResultsSummary); a plugin whose leaves carry a
  status of their own gets a status summing them (`pkg/client/results/processing.go` AggregateStatus).
"""

from __future__ import annotations

from pathlib import Path

SONOBUOY_VERSION = "v0.57.4"
JOB_DRIVER = "Job"
MANUAL_FORMAT = "manual"
DEFAULT_NAMESPACE = "sonobuoy"
# Where the plugin's containers find their files and leave their results.
CONFIG_DIR = Path("/tmp/sonobuoy/config")
RESULTS_DIR = Path("/tmp/sonobuoy/results")
DONE_FILE = "done"
RESULTS_DIR_ENV = "SONOBUOY_RESULTS_DIR"
CONFIG_DIR_ENV = "SONOBUOY_CONFIG_DIR"
# Statuses Sonobuoy counts by name (`pkg/client/results/item.go`); anything else is a status of the plugin's own.
PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
# AggregateStatus splits custom statuses on ", " and ": " to count them: ours must contain neither.
CUSTOM_STATUS_SEPARATORS = (", ", ": ")
# Ours: the manual-format results file the plugin definition names (`result-files`), at the top of the tarball.
RESULTS_FILE = "dra-conformance-results.yaml"

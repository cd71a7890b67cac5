"""The binding checks' path for a driver we did not write: a leased node of the driver under test.

The reference driver plays a vendor's fabric driver here: every node runs its `gpu-fabric` device profile with the
attach controller inside the plugin process, under the plugin's own node-bound identity (whose RBAC gains the claim
watch), and the profile declares bindingConditions without the reference driver's fault switches. The checks must
then lease a set-aside node, claim every device there, judge the plugin's identity as the named writer, and call the
failure check not applicable (nothing makes a vendor's attach fail on demand).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import yaml

from dra_conformance import paths

# A cluster start and the two binding checks at -n 1 (~1 min), with room for a busy machine.
RUN_DEADLINE = 600.0
POD_CHECK = "test_pod_is_bound_only_after_every_binding_condition_is_true_as_written_by_the_named_identity"
FAILURE_CHECK = "test_binding_failure_condition_makes_the_scheduler_clear_the_allocation_and_allocate_again"


def vendor_like_profile(directory: Path) -> Path:
    """The reference profile turned into a fabric driver without fault switches, its controller in the plugin."""
    source = paths.reference_driver_profile()
    profile: dict[str, Any] = yaml.safe_load(source.read_text())
    args = [a for a in profile["run"]["args"] if not a.startswith(("--profile=", "--driver-version="))]
    profile["run"] = {
        "command": profile["run"]["command"],
        "args": [*args, "--profile=gpu-fabric", "--controller-kubeconfig={kubeconfig}", "--attach-delay=1"],
    }
    documents = [doc for doc in yaml.safe_load_all(paths.reference_driver_rbac().read_text()) if doc]
    for document in documents:
        for rule in document.get("rules") or [] if document["kind"] == "ClusterRole" else []:
            if rule["resources"] == ["resourceclaims"]:
                rule["verbs"] = ["get", "list", "watch"]  # the controller watches claims
    (directory / "rbac.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    profile["identity"] = {"serviceAccount": profile["identity"]["serviceAccount"], "rbac": ["rbac.yaml"]}
    profile["devices"]["attributes"] = {
        "model": "string",
        "index": "int",
        "uuid": "string",
        "driverVersion": "version",
        "fabric": "string",
    }
    profile["capabilities"] = {name: name == "bindingConditions" for name in profile["capabilities"]}
    profile.pop("health", None)  # its hooks are judged on the health stream, which this driver does not declare
    profile.pop("version", None)
    path = directory / "fabric-as-vendor.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def test_binding_checks_run_on_a_leased_node_of_a_driver_without_fault_switches(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_conformance.cli",
            "run",
            "--no-html",
            "-n",
            "1",
            f"--profile={vendor_like_profile(tmp_path)}",
            f"--dra-state-dir={tmp_path / 'cluster'}",
            f"--dra-reports-dir={reports}",
            "-p",
            "no:cacheprovider",
            "-rs",
            str(paths.suites_dir() / "binding"),
        ],
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    output = (result.stdout + result.stderr)[-3000:]
    junits = list(reports.glob("*/junit.xml"))
    assert result.returncode == 0 and len(junits) == 1, f"exit {result.returncode}, reports {junits}\n{output}"
    outcomes = {
        case.get("name"): next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        for case in ElementTree.parse(junits[0]).iter("testcase")
    }
    assert outcomes == {POD_CHECK: "passed", FAILURE_CHECK: "skipped"}, f"{outcomes}\n{output}"
    assert "not applicable: needs the reference driver's attach-failure switch" in output, output

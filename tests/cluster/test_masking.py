"""Reports keep no raw networkData: a NIC scenario's interface names, addresses and MACs are masked in every file.

The scenario runs in a second pytest run against this session's local cluster, once masked and once with
`--dra-no-mask`; the unmasked run proves the grep finds the values when they are there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.model.cluster import ClusterInfo

SCENARIO = "nic-network-data"
# What the reference driver's NIC profile reports (drivers/fake-dra/fake_dra/devices.py): documentation-range
# addresses, locally administered MACs, interfaces fake<index>.
RAW_VALUES = re.compile(r"192\.0\.2\.\d+|02:fa:00:00:[0-9a-f]{2}:[0-9a-f]{2}|\bfake\d\b")


def _run_scenario(pytester: pytest.Pytester, state_dir: Path, reports: Path, *extra: str) -> dict[str, list[str]]:
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--dra-cluster-state-dir={state_dir}",
        f"--dra-reports-dir={reports}",
        "-k",
        SCENARIO,
        *extra,
        str(paths.suites_dir() / "status"),
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    found = {}
    for path in sorted(p for p in reports.rglob("*") if p.is_file()):
        hits = sorted(set(RAW_VALUES.findall(path.read_text(errors="replace"))))
        if hits:
            found[str(path.relative_to(reports))] = hits
    return found


def test_network_data_of_a_nic_scenario_is_masked_in_every_report_file(
    pytester: pytest.Pytester, cluster: ClusterInfo, pytestconfig: pytest.Config
) -> None:
    if cluster.backend != "local":
        pytest.skip("attaches a second pytest run to the local cluster's state directory")
    # pytester runs in a directory of its own: a relative state directory is resolved where this run started.
    state_dir = pytestconfig.invocation_params.dir / cluster.details["state_dir"]
    unmasked = _run_scenario(pytester, state_dir, pytester.path / "raw", "--dra-no-mask")
    assert unmasked, "with --dra-no-mask the reports must quote the NIC's networkData (or the grep proves nothing)"
    masked = _run_scenario(pytester, state_dir, pytester.path / "masked")
    assert not masked, f"raw networkData left in the masked run's reports: {masked}"
    print(f"grepped for {RAW_VALUES.pattern}; unmasked run: {unmasked}")

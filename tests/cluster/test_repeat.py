"""`dra-conformance run --repeat N` keeps its cluster between runs and stops it after the last one.

It runs one check twice on a private local cluster and reads the flake record. The cluster must be gone when the
command returns: the runs but the last used to keep it with --dra-keep-cluster, which disowned it, so the last run no
longer stopped it and every `--repeat` left a whole control plane running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from dra_conformance import paths

CHECK = paths.suites_dir() / "protocol" / "test_slices.py"
# Two cluster starts' worth of margin around a one-node cluster start and two runs of one check on a busy machine.
REPEAT_TIMEOUT = 300.0


def _batches() -> set[Path]:
    return set((paths.CHECKOUT / "reports").glob("repeat-*"))


def test_repeat_reports_each_tests_pass_rate_and_stops_its_cluster_after_the_last_run(tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"
    before = _batches()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dra_conformance.cli",
                "run",
                "--no-html",
                "--repeat",
                "2",
                "--nodes",
                "1",
                "-n",
                "1",
                f"--dra-state-dir={state_dir}",
                "--dra-metrics=none",
                "-p",
                "no:cacheprovider",
                str(CHECK),
            ],
            capture_output=True,
            text=True,
            timeout=REPEAT_TIMEOUT,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        batches = _batches() - before
        assert len(batches) == 1, f"expected one new reports/repeat-* directory: {batches}\n{output[-2000:]}"
        record = json.loads((batches.pop() / "flake-record.json").read_text())
        rates = {nodeid: row["pass_rate"] for nodeid, row in record["tests"].items()}
        assert record["runs"] == 2 and rates and set(rates.values()) == {1.0}, record
        state = json.loads((state_dir / "state.json").read_text())
        assert state["phase"] in {"stopped", "failed"}, (
            f"the cluster is still {state['phase']} after the last run (supervisor {state.get('supervisor_pid')})"
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "dra_conformance.cli", "cluster", "down", f"--state-dir={state_dir}"],
            capture_output=True,
            check=False,
        )
        for batch in _batches() - before:
            shutil.rmtree(batch, ignore_errors=True)

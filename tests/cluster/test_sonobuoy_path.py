"""The suite in-cluster through Sonobuoy, as a platform team runs it nightly: the README's recipe, on the real node.

The reference driver is installed as a vendor ships it: its image and a chart rendered as vendors' are (no
toleration, a registry image pulled Always, no Namespace), fixed only by the profile's declared transforms. This is
CI's one certification of the shipped driver over the whole selection (the run from the host covers its kubelet
suite: tests/cluster/test_certification_runs.py). The two
commands of the README's nightly recipe (`dra-conformance sonobuoy run`, then `dra-conformance sonobuoy results`)
are read out of README.md and run as written, with the variables they name set: KUBECONFIG the local cluster's,
PROFILE the vendor chart's profile, CLUSTER its name. `sonobuoy run` builds our images (the suite's, Sonobuoy's) and
imports them into the real node, runs the cluster-level checks in a Job and the node-level ones in a DaemonSet on
the driver's node, and merges both into one verdict. The verdict must be "certified", and the checks that need the
node (the four-layer cross-check, the rolling update) must have been judged in-cluster: passed, not "not
applicable". The fleet report must read the merged verdict as the cluster's one run, and `dra-conformance verdict`
must decide it again alike from the findings the merge recorded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend
from dra_conformance.backends.local.real_node_host import REAL_NODE
from dra_conformance.report.certification import SUMMARY_JSON
from dra_conformance.report.fleet.sources import read_inputs
from dra_conformance.sonobuoy import retrieved, runner
from tests.reference_image import IMAGE_BUILD_DEADLINE, VENDOR_CHART_PROFILE, shipped_driver_cluster

pytestmark = [
    pytest.mark.xdist_group("real-node"),
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: the real node's kubelet and containerd need root"),
]

README = paths.CHECKOUT / "README.md"
NIGHTLY_SECTION = "### Run nightly across clusters (Sonobuoy)"
CLUSTER_NAME = "local-real-node"
# `sonobuoy run` builds the images (a cold suite image takes minutes) and waits for both parts (the suite's checks
# on a busy 2-core machine: minutes each); `results` reads a tarball in seconds.
RUN_DEADLINE = IMAGE_BUILD_DEADLINE + 60.0 * 40
RESULTS_DEADLINE = 120.0
OUTPUT_TAIL = 6000
# Checks that need the node, judged in the node part on the driver's node: the rolling update, and the four-layer
# cases any driver can be put through (a broken prepare comes from the kubelet-side interposer; the case that needs
# the reference driver's CDI fault runs only for a driver with its fault switches).
FOUR_LAYERS = "suites/kubelet/test_four_layers.py::"
ROLLING_UPDATE = "suites/kubelet/test_rolling_update.py::"
FOUR_LAYER_CASES = ("[all-four-green]", "[allocated-but-prepare-failed]", "[ready-but-job-fails]")


def nightly_commands() -> list[str]:
    """The commands of the README's nightly recipe: the first `sh` block of its Sonobuoy section."""
    section = README.read_text().split(NIGHTLY_SECTION, 1)
    assert len(section) == 2, f"README.md has no section {NIGHTLY_SECTION!r}"
    block = section[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split(" #", 1)[0].strip() for line in block.splitlines()]
    commands = [command for command in commands if command]
    assert [command.split()[:3] for command in commands] == [
        ["dra-conformance", "sonobuoy", "run"],
        ["dra-conformance", "sonobuoy", "results"],
    ], f"the README's nightly recipe is `sonobuoy run` then `sonobuoy results`: {commands}"
    return commands


def _as_written(command: str, environment: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    """`command` run by a shell as the README writes it; its exit code and output (stdout, then stderr)."""
    done = subprocess.run(
        ["/bin/sh", "-c", command], env=environment, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def real_node_cluster(tmp_path: Path) -> Iterator[LocalBackend]:
    """A local cluster with the real node running the reference driver from its vendor chart; stopped after the test."""
    with shipped_driver_cluster(tmp_path / "cluster", profile=VENDOR_CHART_PROFILE) as backend:
        yield backend


@pytest.mark.timeout(RUN_DEADLINE + RESULTS_DEADLINE + 60)
def test_the_readme_nightly_recipe_certifies_the_shipped_driver_with_the_node_checks_judged_in_cluster(
    real_node_cluster: LocalBackend, tmp_path: Path
) -> None:
    commands = nightly_commands()
    info = real_node_cluster.start()
    environment = {
        **os.environ,
        # `dra-conformance` as installed beside this interpreter (the checkout's, editable).
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(info.kubeconfig),
        "PROFILE": str(VENDOR_CHART_PROFILE),
        "CLUSTER": CLUSTER_NAME,
    }
    work = tmp_path / "nightly"
    work.mkdir()

    code, ran = _as_written(commands[0], environment, work, RUN_DEADLINE)
    print(ran)
    assert code == runner.EXIT_CERTIFIED, f"{commands[0]}: exit {code}\n{ran[-OUTPUT_TAIL:]}"
    code, shown = _as_written(commands[1], environment, work, RESULTS_DEADLINE)
    print(shown)
    assert code == runner.EXIT_CERTIFIED, f"{commands[1]}: exit {code}\n{shown[-OUTPUT_TAIL:]}"

    verdict = re.search(r"^verdict: (.+?) \(", shown, re.MULTILINE)
    assert verdict is not None and verdict.group(1) == "certified", f"`sonobuoy results` shows no certified:\n{shown}"
    # `  <outcome>  <node id>  (<where>)`, the outcome one or two words.
    listed = [line.split() for line in shown.splitlines() if "::" in line]
    checks = {next(word for word in words if "::" in word): words for words in listed}
    for case in (*(f"{FOUR_LAYERS}*{c}" for c in FOUR_LAYER_CASES), f"{ROLLING_UPDATE}*"):
        prefix, _, suffix = case.partition("*")
        found = [words for nodeid, words in checks.items() if nodeid.startswith(prefix) and suffix in nodeid]
        assert found, f"`sonobuoy results` lists no check {case}:\n{shown}"
        judged = [words for words in found if words[0] == "passed" and words[-2:] == ["(node", f"{REAL_NODE})"]]
        assert judged == found, f"{case} was not judged (passed) on the node in-cluster: {found}"

    # The fleet report reads the merged verdict, the only summary.json of the run (the parts' are part-summary.json).
    summaries = read_inputs([work / "results"]).summaries
    merged = work / "results" / CLUSTER_NAME / retrieved.VERDICT_DIR / SUMMARY_JSON
    assert [(Path(s.source), s.document["verdict"]) for s in summaries] == [(merged, "certified")], [
        s.source for s in summaries
    ]
    # The merge recorded what it decided from: `dra-conformance verdict` decides the same again.
    code, again = _as_written(f"dra-conformance verdict {merged.parent}", environment, work, RESULTS_DEADLINE)
    assert code == 0 and again.startswith("verdict: certified"), f"dra-conformance verdict: exit {code}\n{again}"

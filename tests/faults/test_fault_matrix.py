"""The fault matrix: a run on a private local cluster, faulted from outside, ends in the verdict it deserves.

Each case starts `dra-conformance run` (reference driver, about 25 checks of the protocol and status suites, one
worker) on a cluster of its own, waits until the run has reported a share of its checks, injects one fault from
outside, and reads the run's summary.json: a SIGTERM, the API server killed, the driver killed or hung, a worker
crashed, a second run on the same state dir, a reports dir with no room, a reader that closes the run's output. A
whole default run per case would cost CI twenty minutes; how a fault is handled does not depend on what was
selected. Bad profiles (one that escapes its directory, an alias bomb) are refused before any cluster starts,
through the installed entry point. CI runs the matrix with the other tests; `tox -e faults` runs it alone. The
identity without DeviceClass rights is tests/cluster/test_preflight.py, the frozen metrics adapter
tests/metrics/test_adapter_faults.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import paths
from dra_conformance.report.certification import SUMMARY_JSON, VERDICT_JSON
from tests.tmpfs import mounted_tmpfs

# A cluster start with the binaries cached, the selection below (~25 s alone) and its teardown, with room for a host
# busy with the rest of CI.
RUN_DEADLINE = 600.0
# What each faulted run runs: about 25 checks that prepare, unprepare and write status through the driver on both
# kwok nodes, its opaque config included.
FAULT_SELECTION = ("suites/protocol/test_lifecycle.py", "suites/protocol/test_opaque_config.py", "suites/status")
# The share of the run's progress (pytest's "[ NN%]" lines) after which the fault is injected: mid-run.
FAULT_AT_PERCENT = 39
# The one reason a clean run of FAULT_SELECTION is not certified.
SUBSET = "a subset of the bundled suites"
# How long the hung driver stays stopped: over twice the silence that makes a finding (three probes 2 s apart), and
# long enough for checks that need it to run into it.
HUNG_SECONDS = 15.0
# A reports dir with room for the verdict and little else (a summary.json is a few KB, a junit.xml tens of KB).
FULL_DISK_SIZE = "200k"
# A refused run (busy state dir, bad profile): one line, before anything starts; generous for a busy host.
REFUSAL_DEADLINE = 60.0
# The profile loader's budget for refusing an alias bomb, and how much two starts of the CLI differ on a busy host.
READING_BUDGET = 1.0
START_JITTER = 2.0
# The alias bomb: ten levels of ten aliases each (10^10 nodes if expanded), a few hundred bytes.
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)
# How long the run may take to stop after a SIGTERM: its cluster's stop and the reports.
STOP_DEADLINE = 180.0
PROGRESS_POLL = 0.5

# Each case outlives the suites' per-test deadline (pyproject's `timeout`): a whole run, then its stop.
pytestmark = pytest.mark.timeout(RUN_DEADLINE + STOP_DEADLINE)


CLI = (sys.executable, "-m", "dra_conformance.cli")


@dataclass
class RunUnderFault:
    """A `dra-conformance run` in progress, its output collected as it comes."""

    process: subprocess.Popen[str]
    state_dir: Path
    reports: Path
    output: list[str] = field(default_factory=list)

    def _pump(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self.output.append(line)
        except (ValueError, OSError):  # the test closed the pipe (the closed-output case): nothing more to read
            return

    def progress(self) -> int:
        """The highest "[ NN%]" pytest printed so far."""
        found = [
            int(part.split("%", 1)[0].strip("[ "))
            for line in self.output
            for part in line.split("[")[1:]
            if "%]" in part and part.split("%", 1)[0].strip().isdigit()
        ]
        return max(found, default=0)

    def wait_for_progress(self, percent: int) -> None:
        """Until the run reported `percent` of its checks (fails with the output when it ends first)."""
        deadline = time.monotonic() + RUN_DEADLINE
        while self.progress() < percent:
            assert self.process.poll() is None, f"the run ended before {percent}%: {''.join(self.output)[-3000:]}"
            assert time.monotonic() < deadline, f"no {percent}% within {RUN_DEADLINE}s: {''.join(self.output)[-2000:]}"
            threading.Event().wait(PROGRESS_POLL)

    def component_pid(self, name: str) -> int:
        """The pid the cluster's supervisor started `name` with."""
        state = json.loads((self.state_dir / "state.json").read_text())
        return int(state["processes"][name])

    def finish(self, timeout: float = RUN_DEADLINE, document: str = SUMMARY_JSON) -> dict[str, Any]:
        """Wait for the run to end; its summary (or `document`: the verdict written first, VERDICT_JSON)."""
        self.process.wait(timeout=timeout)
        summaries = list(self.reports.glob(f"*/{document}"))
        assert len(summaries) == 1, f"one {document} expected under {self.reports}: {summaries}\n{self.text()[-3000:]}"
        summary: dict[str, Any] = json.loads(summaries[0].read_text())
        return summary

    def text(self) -> str:
        """Everything the run printed."""
        return "".join(self.output)


@pytest.fixture
def faulted_run(tmp_path: Path) -> Iterator[Callable[..., RunUnderFault]]:
    """Starts a default run on a private cluster; stops it (and so its cluster) whatever the test did."""
    runs: list[RunUnderFault] = []

    def start(*extra: str, reports: Path | None = None) -> RunUnderFault:
        state_dir = tmp_path / "cluster"
        reports = reports or tmp_path / f"reports-{len(runs)}"
        process = subprocess.Popen(
            [
                *CLI,
                "run",
                "-n",
                "1",
                f"--dra-state-dir={state_dir}",
                f"--dra-reports-dir={reports}",
                "-p",
                "no:cacheprovider",
                # A line per check, each with the run's progress ("[ NN%]"): the fault lands where it is meant to.
                "-v",
                *extra,
                *FAULT_SELECTION,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=paths.CHECKOUT,
        )
        run = RunUnderFault(process, state_dir, reports)
        threading.Thread(target=run._pump, daemon=True).start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.process.send_signal(signal.SIGTERM)
            try:
                run.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                run.process.kill()
                run.process.wait()


def test_a_run_stopped_by_sigterm_halfway_is_incomplete_with_its_counts(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    run.process.send_signal(signal.SIGTERM)
    summary = run.finish(STOP_DEADLINE)
    accounting = summary["accounting"]
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert any(str(r).startswith("interrupted after") for r in summary["reasons"]), summary["reasons"]
    assert 0 < accounting["never_run"] < accounting["collected"], accounting
    assert run.process.returncode != 0, "an interrupted run's exit code says so"


def test_a_sigterm_as_the_checks_end_still_leaves_the_summary(faulted_run: Callable[..., RunUnderFault]) -> None:
    run = faulted_run()
    run.wait_for_progress(100)  # the last check reported: the cluster's stop, the verdict and the reports follow
    run.process.send_signal(signal.SIGTERM)
    summary = run.finish(STOP_DEADLINE)
    assert summary["accounting"]["never_run"] == 0, summary["accounting"]
    assert summary["verdict"] in {"incomplete", "certified"}, summary["reasons"]


def test_the_api_server_killed_mid_run_is_a_cluster_fault_and_fails_no_capability(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    os.kill(run.component_pid("kube-apiserver"), signal.SIGKILL)
    summary = run.finish()
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert any(str(r).startswith("cluster fault: kube-apiserver") for r in summary["reasons"]), summary["reasons"]
    failed = {c: row for c, row in summary["capabilities"].items() if row["state"] == "failed"}
    assert not failed, f"a cluster fault failed driver capabilities: {failed}"


def test_the_driver_killed_from_outside_is_reported_and_never_certified(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    os.kill(run.component_pid("driver-kwok-node-0"), signal.SIGKILL)
    summary = run.finish()
    assert summary["verdict"] == "not certified", summary["reasons"]
    unexpected = summary["driver_exits"]["unexpected"]
    assert any(e["node"] == "kwok-node-0" and e["code"] == -signal.SIGKILL for e in unexpected), unexpected
    assert str(summary["reasons"][0]).startswith("run.driver-stays-up"), summary["reasons"]


def test_a_crashed_worker_makes_the_run_incomplete_not_a_driver_failure(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    # xdist's workers are execnet gateways (`python -c "import sys;exec(eval(sys.stdin.readline()))"`); the run's
    # other child is the local cluster's supervisor, whose death would be a cluster fault instead.
    workers = subprocess.run(
        ["pgrep", "-P", str(run.process.pid), "-f", "sys.stdin.readline"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert workers, f"no xdist worker process under the run (pid {run.process.pid})"
    os.kill(int(workers[0]), signal.SIGKILL)
    summary = run.finish()
    # The crashed worker is not replaced (`--max-worker-restart=0`): the run ends early, its checks never ran.
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert any("worker crash" in str(r) for r in summary["reasons"]), summary["reasons"]
    failed = {c: row for c, row in summary["capabilities"].items() if row["state"] == "failed"}
    assert not failed, f"a crashed worker failed driver capabilities: {failed}"


def _judged_clean(summary: dict[str, Any]) -> bool:
    """The selection's checks found nothing: "incomplete" only because it is not every bundled suite."""
    return summary["verdict"] == "incomplete" and all(str(r).startswith(SUBSET) for r in summary["reasons"])


def _hold(run: RunUnderFault, seconds: float, what: str) -> None:
    """Keep the fault on for `seconds` while watching that the run goes on (it must outlive its fault)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert run.process.poll() is None, f"the run ended while {what}: {run.text()[-3000:]}"
        threading.Event().wait(PROGRESS_POLL)


def test_a_driver_that_stops_answering_is_named_with_its_node_and_window(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    driver = run.component_pid("driver-kwok-node-0")
    os.kill(driver, signal.SIGSTOP)
    try:
        _hold(run, HUNG_SECONDS, f"the driver on kwok-node-0 was stopped (SIGSTOP, {HUNG_SECONDS:.0f} s)")
    finally:
        os.kill(driver, signal.SIGCONT)
    summary = run.finish()
    silences = summary["driver_silences"]
    assert [s["node"] for s in silences] == ["kwok-node-0"], silences
    assert "run.driver-answers" in " ".join(map(str, summary["reasons"])), summary["reasons"]
    assert summary["verdict"] == "not certified", summary["reasons"]
    # Every failure rests on an obligation: none is left without one, in the output or the summary.
    unowned = "no registry obligation"
    assert unowned not in run.text() and unowned not in json.dumps(summary), [
        line for line in run.text().splitlines() if unowned in line
    ]


def test_a_second_run_on_a_busy_state_dir_is_refused_in_one_line_and_the_first_is_judged_alone(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    first = faulted_run()
    first.wait_for_progress(1)
    second = faulted_run()
    code = second.process.wait(timeout=REFUSAL_DEADLINE)
    refusal = second.text().strip().splitlines()
    assert code != 0 and len(refusal) == 1, f"exit {code}: {refusal}"
    assert f"pid {first.process.pid}" in refusal[0] and "in use by" in refusal[0], refusal
    summary = first.finish()
    assert _judged_clean(summary), summary["reasons"]
    assert not list(second.reports.glob("*/summary.json")), "the refused run wrote a summary"


@pytest.fixture
def tiny_reports(tmp_path: Path) -> Iterator[Path]:
    """A reports dir on a tmpfs of FULL_DISK_SIZE (root only); unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "tiny-reports", FULL_DISK_SIZE) as reports:
        yield reports


def test_a_full_reports_dir_still_gives_the_verdict_on_the_terminal_and_in_summary_json(
    faulted_run: Callable[..., RunUnderFault], tiny_reports: Path
) -> None:
    run = faulted_run(reports=tiny_reports)
    # The verdict and the counts are written first, into room set aside; summary.json may not fit after them.
    verdict = run.finish(document=VERDICT_JSON)
    verdicts = [line for line in run.text().splitlines() if line.startswith("verdict: ")]
    assert verdicts and f"verdict: {verdict['verdict']} " in verdicts[-1], f"{verdicts}; {run.text()[-3000:]}"
    # Checks that could not record are the harness's: the run cannot judge the driver, and does not blame it.
    assert verdict["verdict"] == "incomplete", verdict
    assert "INTERNALERROR" not in run.text(), run.text()[-3000:]
    storm = [line for line in run.text().splitlines() if "raise ReportsFull" in line or "Traceback" in line]
    assert not storm, f"{len(storm)} traceback lines for a full reports dir, e.g. {storm[:2]}"
    full = [line for line in run.text().splitlines() if "reports dir full" in line and "bytes left" in line]
    assert full, f"no line naming the full reports dir and the space left: {run.text()[-3000:]}"
    scratch = list(tiny_reports.rglob("*.tmp"))
    assert not scratch, f"scratch files left on the full reports dir: {scratch}"


def test_a_reader_that_closes_the_runs_output_loses_no_summary(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    assert run.process.stdout is not None
    run.process.stdout.close()
    summary = run.finish()
    assert _judged_clean(summary), summary["reasons"]
    assert summary["accounting"]["collected"] > 0, summary["accounting"]


def _refused(directory: Path, profile_text: str) -> tuple[int, list[str], float]:
    """`run` with a profile in `directory` holding `profile_text`: exit code, output lines, seconds."""
    profile = directory / "escaping.yaml"
    profile.write_text(profile_text)
    started = time.monotonic()
    done = subprocess.run(
        [
            *CLI,
            "run",
            f"--profile={profile}",
            f"--state-dir={directory / 'cluster'}",
            f"--reports-dir={directory / 'r'}",
        ],
        capture_output=True,
        text=True,
        timeout=REFUSAL_DEADLINE,
        cwd=paths.CHECKOUT,
    )
    return done.returncode, (done.stdout + done.stderr).strip().splitlines(), time.monotonic() - started


def test_a_profile_that_escapes_its_directory_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    profiles = shutil.copytree(paths.fixtures_dir() / "profiles", tmp_path / "profiles")  # with the RBAC it names
    profile = yaml.safe_load((profiles / "reference-driver.yaml").read_text())
    outside = tmp_path / "outside" / "escaped"
    profile["run"]["createDirs"] = [f"{{data_dir}}/{'../' * 12}{str(outside).lstrip('/')}"]
    code, lines, _ = _refused(profiles, yaml.safe_dump(profile))
    assert code == 2 and len(lines) == 1 and "run.createDirs[0]" in lines[0], f"exit {code}: {lines}"
    assert not outside.parent.exists(), f"{outside.parent} was created"
    assert not (profiles / "cluster").exists(), "a cluster state dir was created for a refused profile"


def test_an_alias_bomb_is_refused_in_one_line_within_a_second_of_reading(tmp_path: Path) -> None:
    started = time.monotonic()
    subprocess.run([*CLI, "--version"], capture_output=True, check=True, timeout=REFUSAL_DEADLINE)
    starting = time.monotonic() - started  # the interpreter's start and the CLI's imports, before any reading
    code, lines, seconds = _refused(tmp_path, ALIAS_BOMB)
    assert code == 2 and len(lines) == 1, f"exit {code} after {seconds:.1f} s: {lines}"
    assert "alias" in lines[0], lines
    assert seconds - starting < READING_BUDGET + START_JITTER, (
        f"{seconds:.1f} s to refuse the alias bomb, {starting:.1f} s of them the CLI's start"
    )

"""`dra-conformance sonobuoy-entry`: what the plugin's container runs.

It runs `dra-conformance run --cluster existing` (in a pod: the pod's ServiceAccount) with the mounted profile and
the cluster's name, then packs the run's reports (junit.xml, summary.json, summary.md, allure-results/, records)
with the `manual` results file and the run's output into one tarball, and writes the tarball's path into Sonobuoy's
done file. The done file is written whatever happened (bad input, a refused preflight, a crash of the run, SIGTERM),
so Sonobuoy's worker never waits for results until the plugin times out.

A part of a split run (`--part cluster|node`, see `sonobuoy/part.py`) also records every check for the merge
(`part-record.json`), and its summary is packed as `part-summary.json`: a part's verdict is not the run's (the fleet
report reads every `summary.json` it finds; the merged one is written by `dra-conformance sonobuoy run`). The node
part runs with its temporary files under the node's kubelet root (`--scratch-dir`), where the node's kubelet reaches
the sockets the suite opens there (the kubelet-side interposer's).

Exit code: 0 when the results carry a verdict, whatever it is (the verdict is the result; Sonobuoy reads it from the
results, not from the container's exit); 1 when the run ended without one; 2 for bad input. The done file comes
first in every case.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from dra_conformance.report.certification import SUMMARY_JSON, SUMMARY_MARKDOWN
from dra_conformance.sonobuoy import protocol
from dra_conformance.sonobuoy import results as manual
from dra_conformance.sonobuoy.part import RECORD_FILE, RECORD_OPTION, Part

EXIT_VERDICT = 0
EXIT_NO_VERDICT = 1
EXIT_USAGE = 2
TARBALL = "dra-conformance.tar.gz"
RUN_LOG = "run.log"
# The run's last lines quoted in the results when it wrote no summary.
TAIL_LINES = 20
# Where the run writes its reports (one run directory under it), inside the results volume.
REPORTS_SUBDIR = "reports"
# A part's summary in its tarball: what the merge reads, and no summary.json for the fleet report to take for the run's.
PART_SUMMARY_JSON = "part-summary.json"
PART_SUMMARY_MARKDOWN = "part-summary.md"
# The status of a part's results in `sonobuoy status`: not a verdict (no ", " or ": ", see protocol.py).
PART_STATUS = "Part of the verdict (dra-conformance sonobuoy results)"
NODE_NAME_ENV = "NODE_NAME"


@dataclass(frozen=True)
class EntrySettings:
    """What the plugin's container passes: the mounted profile, the cluster's name, Sonobuoy's results directory."""

    profile: Path | None
    cluster_name: str | None
    results_dir: Path
    run_args: tuple[str, ...] = field(default=())
    # Which part of a split run this is, the node it runs on (the node part), and where its temporary files go.
    part: Part = Part.WHOLE
    node: str | None = None
    scratch_dir: Path | None = None


def results_dir_from(environ: Mapping[str, str], given: Path | None) -> Path:
    """`--results-dir`, else the directory Sonobuoy names in SONOBUOY_RESULTS_DIR, else its default."""
    if given is not None:
        return given
    return Path(environ.get(protocol.RESULTS_DIR_ENV) or protocol.RESULTS_DIR)


def node_from(environ: Mapping[str, str]) -> str | None:
    """The node the pod runs on, as the node part's pod spec names it in NODE_NAME."""
    return environ.get(NODE_NAME_ENV) or None


def run_command(settings: EntrySettings, reports_dir: Path, scratch: Path | None = None) -> list[str]:
    """`dra-conformance run` against the pod's own cluster, as the pod's ServiceAccount.

    A part records its checks; with `scratch`, the run's temporary files go there.
    """
    assert settings.profile is not None and settings.cluster_name is not None, "checked by _usage_problem"
    record = [f"{RECORD_OPTION}={reports_dir / RECORD_FILE}"] if settings.part is not Part.WHOLE else []
    environment = ["env", f"TMPDIR={scratch}"] if scratch is not None else []
    return [
        *environment,
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "--cluster",
        "existing",
        "--profile",
        str(settings.profile),
        f"--dra-cluster-name={settings.cluster_name}",
        f"--dra-reports-dir={reports_dir}",
        *settings.run_args,
        *record,
    ]


@dataclass
class RunOutcome:
    """How the run ended: its exit code (None: never started), its run directory, its last lines of output."""

    exit_code: int | None = None
    run_dir: Path | None = None
    tail: list[str] = field(default_factory=list)


def run_suite(command: Sequence[str], log: Path, echo: IO[str]) -> tuple[int, list[str]]:
    """Run `command`, copying its output to `echo` (the container's log) and to `log`; return its code and tail.

    SIGTERM (the pod deleted, the plugin timed out) is passed on to the run, which ends in order and still writes
    its summary within Sonobuoy's grace period.
    """
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with log.open("w") as written:
        child = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        with _forwarding_sigterm(child):
            assert child.stdout is not None
            for line in child.stdout:
                echo.write(line)
                echo.flush()
                written.write(line)
                tail.append(line.rstrip("\n"))
            code = child.wait()
    return code, list(tail)


@contextmanager
def _forwarding_sigterm(child: subprocess.Popen[str]) -> Iterator[None]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def find_run_dir(reports_dir: Path) -> Path | None:
    """The run directory `dra-conformance run` made under `reports_dir` (the newest, should there be several)."""
    runs = sorted((p for p in reports_dir.glob("*/") if p.is_dir() and p.name != "clusters"), key=lambda p: p.name)
    return runs[-1] if runs else None


def results_document(outcome: RunOutcome, part: Part = Part.WHOLE, node: str | None = None) -> dict[str, Any]:
    """The manual results tree: from the run's summary, else the reason there is none.

    A part's tree says it is a part: its leaves are its checks, its verdict is not the run's.
    """
    summary_path = outcome.run_dir / SUMMARY_JSON if outcome.run_dir is not None else None
    if summary_path is not None and summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except json.JSONDecodeError as error:
            return manual.without_summary(outcome.exit_code, [*outcome.tail, f"{summary_path}: {error}"])
        reasons = manual.junit_reasons(summary_path.parent / manual.JUNIT_XML)
        document = manual.from_summary(summary, reasons)
        if part is not Part.WHOLE:
            where = f"node {node or '?'}" if part is Part.NODE else "cluster"
            document["status"] = PART_STATUS
            leaf = document["items"][0]
            leaf["status"] = PART_STATUS
            leaf["name"] = f"{part}-level part ({where}), merged by `dra-conformance sonobuoy results`: {leaf['name']}"
        return document
    return manual.without_summary(outcome.exit_code, outcome.tail)


def pack(source: Path, tarball: Path) -> None:
    """Tar and gzip `source`'s contents (paths relative to it) into `tarball`, through a sibling renamed into place."""
    partial = tarball.with_name(tarball.name + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        for path in sorted(source.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(source)), recursive=False)
    partial.replace(tarball)


def write_done(results_dir: Path, result_file: Path) -> Path:
    """Sonobuoy's done file naming `result_file`, written whole (the worker reads it as soon as it exists)."""
    done = results_dir / protocol.DONE_FILE
    partial = results_dir / (protocol.DONE_FILE + ".partial")
    partial.write_text(str(result_file))
    partial.replace(done)
    return done


def stage_part(staged: Path, record: Path | None) -> None:
    """A part's run directory as the merge reads it: its record beside its summary, renamed part-summary.*."""
    if record is not None and record.is_file():
        shutil.copyfile(record, staged / RECORD_FILE)
    for name, renamed in ((SUMMARY_JSON, PART_SUMMARY_JSON), (SUMMARY_MARKDOWN, PART_SUMMARY_MARKDOWN)):
        if (staged / name).is_file():
            (staged / name).replace(staged / renamed)


def deliver(
    results_dir: Path,
    outcome: RunOutcome,
    log: Path | None,
    part: Part = Part.WHOLE,
    node: str | None = None,
    record: Path | None = None,
) -> tuple[Path, bool]:
    """Pack the run's reports, the results file and the log; write done. Return the result file and whether a verdict.

    Should packing fail (a full volume), the results file alone is listed in done: Sonobuoy still gets a reason.
    """
    staged = outcome.run_dir if outcome.run_dir is not None else results_dir / "no-run"
    document = results_document(outcome, part, node)
    try:
        staged.mkdir(parents=True, exist_ok=True)
        manual.write(document, staged)
        if part is not Part.WHOLE:
            stage_part(staged, record)
        if log is not None and log.is_file():
            (staged / RUN_LOG).write_bytes(log.read_bytes())
        result_file = results_dir / TARBALL
        pack(staged, result_file)
    except OSError as error:
        document = manual.without_summary(outcome.exit_code, [*outcome.tail, f"packing the results: {error}"])
        result_file = manual.write(document, results_dir)
    write_done(results_dir, result_file)
    return result_file, document["status"] != protocol.FAILED


def entry(
    settings: EntrySettings,
    echo: IO[str] = sys.stdout,
    runner: Callable[[Sequence[str], Path, IO[str]], tuple[int, list[str]]] = run_suite,
) -> int:
    """Run the suite and deliver its results to Sonobuoy; the done file is written whatever happens."""
    results_dir = settings.results_dir
    results_dir.mkdir(parents=True, exist_ok=True)
    reports = results_dir / REPORTS_SUBDIR
    log = results_dir / RUN_LOG
    outcome = RunOutcome()
    problem = _usage_problem(settings)
    scratch = None
    # A SIGTERM before the run starts (or after it ended) still delivers; during the run it goes to the run.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        if problem is not None:
            print(problem, file=sys.stderr)
            outcome.tail = [problem]
            log.write_text(problem + "\n")
            return EXIT_USAGE
        if settings.scratch_dir is not None:
            scratch = settings.scratch_dir / secrets.token_hex(4)
            scratch.mkdir(parents=True)
        outcome.exit_code, outcome.tail = runner(run_command(settings, reports, scratch), log, echo)
        outcome.run_dir = find_run_dir(reports)
    except BaseException as error:
        outcome.tail.append(f"dra-conformance sonobuoy-entry: {type(error).__name__}: {error}")
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        result_file, verdict = deliver(results_dir, outcome, log, settings.part, settings.node, reports / RECORD_FILE)
        signal.signal(signal.SIGTERM, previous)
        echo.write(f"dra-conformance sonobuoy-entry: {result_file} listed in {results_dir / protocol.DONE_FILE}\n")
        echo.flush()
    return EXIT_VERDICT if verdict else EXIT_NO_VERDICT


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _usage_problem(settings: EntrySettings) -> str | None:
    if settings.profile is None:
        return "dra-conformance sonobuoy-entry: needs --profile PATH (the plugin mounts it from its ConfigMap)"
    if settings.cluster_name is None:
        return "dra-conformance sonobuoy-entry: needs --cluster-name NAME"
    if not settings.profile.is_file():
        return f"dra-conformance sonobuoy-entry: driver profile {settings.profile}: no such file"
    if not settings.cluster_name.strip():
        return "dra-conformance sonobuoy-entry: --cluster-name is empty"
    if settings.part is Part.NODE and settings.node is None:
        return f"dra-conformance sonobuoy-entry: the node part needs its node's name in ${NODE_NAME_ENV} (from the pod)"
    return None

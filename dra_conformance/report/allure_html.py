"""Allure results as HTML people open: Allure 3 from npm (Node.js, no Java), rendered and served on localhost.

`dra-conformance run` renders `reports/<run-id>/allure-results/` into `reports/<run-id>/allure-report/` after
pytest is done (JUnit written, artifacts masked), when Node.js and npm are on PATH; without them it says in one
line that the HTML was not rendered and why, and the run's exit code stays pytest's. `dra-conformance report
<run-id>` renders an existing run, and `--serve` serves the HTML on 127.0.0.1 (the report loads its data with
fetch, which browsers refuse on file://).

The Allure command-line tool is pinned by `allure_npm/package.json` and `package-lock.json`, shipped in the wheel
and installed with `npm ci` into the per-user cache, one directory per pinned version
(`~/.cache/dra-conformance/npm/allure-3.18.0/`), reinstalled only when the lock file changes.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from dra_conformance.errors import ConformanceError, UsageError
from dra_conformance.report.allure_config import allurerc

ALLURE_VERSION = "3.18.0"
NPM_PROJECT = Path(__file__).resolve().parent / "allure_npm"
NPM_FILES = ("package.json", "package-lock.json")
# Loaded into Node before Allure's code (see the file).
NODE_POLYFILL = "iterator-toarray.mjs"
# Our renderer on Allure's library (see the file); copied under the installed tool, whose packages it imports.
RENDER_SCRIPT = "render.mjs"
# The certification summary the run wrote: the report's name and quality gates come from it.
SUMMARY_FILE = "summary.json"
# The report's view that opens with the certification verdict and the canary gate's rules (its quality gates).
OPENING_VIEW = "#qualityGate"
# Debian packages to look at a rendered report headlessly (the screenshot test); rendering needs none.
SCREENSHOT_PACKAGES = NPM_PROJECT / "debian-packages.txt"
RESULTS_DIR = "allure-results"
REPORT_DIR = "allure-report"
# Written into the tool's cache directory once `npm ci` succeeded: the sha256 of the lock file it installed.
STAMP = ".installed-lock-sha256"
# chokidar, a dependency of allure 3.18.0, declares node >= 20.19.0; older versions fail at start-up.
MIN_NODE = (20, 19)
# `npm ci` of allure 3.18.0 fetches ~160 packages (53 MB unpacked): ~10 s here, minutes on a slow registry
# mirror; ten minutes guards a hung one.
NPM_CI_TIMEOUT = 600.0
# `allure generate` of a full run (~600 results) takes seconds; five minutes guards a hung Node process.
GENERATE_TIMEOUT = 300.0
# `node --version` answers at once.
NODE_VERSION_TIMEOUT = 30.0


class RenderError(ConformanceError):
    """Installing the pinned Allure tool or rendering a run's results failed."""


@dataclass(frozen=True)
class NodeTools:
    """The Node.js and npm executables that render the report."""

    node: str
    npm: str


def parse_node_version(text: str) -> tuple[int, int] | None:
    """`v20.20.2` -> (20, 20); None when `text` is not a Node.js version."""
    found = re.fullmatch(r"\s*v?(\d+)\.(\d+)\.\d+\S*\s*", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def node_problem(node: str | None, npm: str | None, version: str | None) -> str | None:
    """Why Node.js cannot render the report (None: it can); `version` is what `node --version` printed."""
    if node is None or npm is None:
        absent = " and ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
        return f"{absent} not found on PATH (Allure 3 HTML needs Node.js >= {MIN_NODE[0]}.{MIN_NODE[1]} and npm)"
    parsed = parse_node_version(version or "")
    if parsed is None:
        return f"{node} --version printed {version!r}, not a Node.js version"
    if parsed < MIN_NODE:
        return f"Node.js {parsed[0]}.{parsed[1]} is older than {MIN_NODE[0]}.{MIN_NODE[1]}, which Allure 3 needs"
    return None


def find_node() -> tuple[NodeTools | None, str | None]:
    """The Node.js tools on PATH, or None and the reason they cannot render the report."""
    node, npm = shutil.which("node"), shutil.which("npm")
    version = None
    if node is not None:
        try:
            answer = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=NODE_VERSION_TIMEOUT, check=False
            )
            version = answer.stdout
        except (OSError, subprocess.TimeoutExpired) as error:
            version = str(error)
    problem = node_problem(node, npm, version)
    if problem is not None or node is None or npm is None:
        return None, problem
    return NodeTools(node=node, npm=npm), None


def tool_dir(cache_dir: Path) -> Path:
    """Where the pinned Allure tool is installed: `<cache>/npm/allure-<version>/`."""
    return cache_dir / "npm" / f"allure-{ALLURE_VERSION}"


def lock_digest(project: Path = NPM_PROJECT) -> str:
    """sha256 of the shipped lock file: a changed lock reinstalls the tool."""
    return hashlib.sha256((project / "package-lock.json").read_bytes()).hexdigest()


def allure_cli(installed: Path) -> Path:
    """The Allure command line's entry point (run with node: no shell, no npx)."""
    return installed / "node_modules" / "allure" / "cli.js"


def npm_ci_command(npm: str) -> list[str]:
    """`npm ci` exactly as the lock file says, without install scripts (the pinned tree has none), quietly."""
    return [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]


def render_command(node: str, script: Path, config: Path, results: Path) -> list[str]:
    """Our render script over `results` with `config` (name, output, quality gate): no shell, no npx.

    Not `allure generate`, which evaluates no quality gate, nor `allure run`, which watches for results a test
    process may still write. The polyfill gives Node 20 what the quality gate needs.
    """
    return [node, "--import", str(NPM_PROJECT / NODE_POLYFILL), str(script), str(config), str(results)]


def _tail(text: str, words: int = 40) -> str:
    return " ".join(text.split()[-words:])


def install(tools: NodeTools, cache_dir: Path, project: Path = NPM_PROJECT) -> Path:
    """The pinned Allure tool, installed with `npm ci` into the cache unless the same lock is installed there."""
    target = tool_dir(cache_dir)
    digest = lock_digest(project)
    stamp = target / STAMP
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if stamp.is_file() and stamp.read_text().strip() == digest and allure_cli(target).is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            for name in NPM_FILES:
                shutil.copy2(project / name, staging / name)
            try:
                result = subprocess.run(
                    npm_ci_command(tools.npm),
                    cwd=staging,
                    capture_output=True,
                    text=True,
                    timeout=NPM_CI_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise RenderError(
                    f"install allure {ALLURE_VERSION}: npm ci did not finish in {NPM_CI_TIMEOUT:g}s"
                ) from None
            except OSError as error:
                raise RenderError(f"install allure {ALLURE_VERSION}: run npm ci: {error}") from None
            if result.returncode != 0 or not allure_cli(staging).is_file():
                raise RenderError(
                    f"install allure {ALLURE_VERSION}: npm ci exited {result.returncode}: {_tail(result.stderr)}"
                )
            (staging / STAMP).write_text(digest + "\n")
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_run(target: str, reports_dir: Path) -> Path:
    """The run directory `target` names: a run id under `reports_dir`, a run directory, or its allure-results."""
    candidates = [Path(target), reports_dir / target]
    for candidate in candidates:
        if candidate.name == RESULTS_DIR and candidate.is_dir():
            candidate = candidate.parent
        if (candidate / RESULTS_DIR).is_dir():
            return candidate
    for candidate in candidates:
        if candidate.is_dir():
            raise UsageError(f"{candidate} holds no {RESULTS_DIR}/ (was it a run of the suites?)")
    raise UsageError(f"no run {target!r}: neither a directory nor a run id under {reports_dir}")


def report_name(run_dir: Path) -> str:
    """The report's title, which its header shows first: the verdict and the canary gate, where the run wrote them."""
    summary = _summary(run_dir)
    if summary is None:
        return f"dra-conformance {run_dir.name}"
    driver = (summary.get("run") or {}).get("driver", "driver")
    gate = (summary.get("canary_gate") or {}).get("state", "not evaluated")
    return f"{driver}: {summary['verdict']} (canary gate: {gate}) - dra-conformance {run_dir.name}"


def _summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None
    return summary if isinstance(summary, dict) and "verdict" in summary else None


def render(run_dir: Path, tools: NodeTools, cache_dir: Path) -> Path:
    """Render `run_dir/allure-results` into `run_dir/allure-report` (replaced); the report's index.html."""
    results = run_dir / RESULTS_DIR
    if not results.is_dir():
        raise UsageError(f"{run_dir} holds no {RESULTS_DIR}/")
    installed = install(tools, cache_dir)
    output = run_dir / REPORT_DIR
    shutil.rmtree(output, ignore_errors=True)
    # Under the installed tool: the script imports Allure's packages from its node_modules. A directory of its own
    # per render, so concurrent renders (and a user's allurerc.* in the current directory) do not meet.
    with tempfile.TemporaryDirectory(prefix=".render-", dir=installed) as scratch:
        config, script = Path(scratch) / "allurerc.mjs", Path(scratch) / RENDER_SCRIPT
        shutil.copyfile(NPM_PROJECT / RENDER_SCRIPT, script)
        config.write_text(allurerc(report_name(run_dir), str(output.resolve()), _summary(run_dir)))
        command = render_command(tools.node, script, config, results.resolve())
        try:
            result = subprocess.run(
                command, cwd=scratch, capture_output=True, text=True, timeout=GENERATE_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise RenderError(f"render {results}: Allure did not finish in {GENERATE_TIMEOUT:g}s") from None
        except OSError as error:
            raise RenderError(f"render {results}: run Allure: {error}") from None
    index = output / "index.html"
    if result.returncode != 0 or not index.is_file():
        raise RenderError(f"render {results}: Allure exited {result.returncode}: {_tail(result.stderr)}")
    return index


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per file fetched would bury the URL the user needs


def report_server(report_dir: Path, port: int = 0, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """An HTTP server of `report_dir` on loopback (port 0: any free port); the caller serves and closes it."""
    handler = functools.partial(_QuietHandler, directory=str(report_dir))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve(report_dir: Path, port: int, echo: Callable[[str], None]) -> None:
    """Serve `report_dir` on 127.0.0.1 until Ctrl-C."""
    with report_server(report_dir, port) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        echo(f"serving {report_dir} at {base}{OPENING_VIEW} (the verdict and the canary gate; Ctrl-C stops)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            echo("stopped serving")


def report_command(
    target: str, reports_dir: Path, cache_dir: Path, serve_port: int | None, echo: Callable[[str], None]
) -> None:
    """`dra-conformance report <run-id>`: render a run's results, then serve them when `serve_port` is given."""
    run_dir = resolve_run(target, reports_dir)
    tools, problem = find_node()
    if tools is None:
        raise UsageError(f"cannot render {run_dir / RESULTS_DIR}: {problem}")
    try:
        index = render(run_dir, tools, cache_dir)
    except OSError as error:  # the cache or the run's directory is not writable
        raise RenderError(f"render {run_dir / RESULTS_DIR}: {error}") from None
    echo(f"allure HTML: {index}")
    if serve_port is not None:
        serve(index.parent, serve_port, echo)


class RunRenderer:
    """A pytest plugin for `dra-conformance run`: notes the run's results directory, renders it after pytest ends.

    Only the CLI registers it (`pytest.main(plugins=[...])`), so plain `pytest` never renders. The terminal
    summary says what will happen, so that pytest's outcome line stays the run's last line; `render_now` runs
    once `pytest.main` returned, after the masking of the run's artifacts.
    """

    def __init__(self, cache_dir: Path) -> None:
        """Render with the tool installed under `cache_dir`."""
        self.cache_dir = cache_dir
        self.run_dir: Path | None = None
        self.tools, self.problem = find_node()

    def _results(self, config: Any) -> Path | None:
        if hasattr(config, "workerinput") or config.option.collectonly:
            return None
        found = getattr(config.option, "allure_report_dir", None)
        return Path(found) if found else None

    def pytest_terminal_summary(self, terminalreporter: Any, config: Any) -> None:
        """Say where the HTML goes, or in one line why it will not be rendered."""
        results = self._results(config)
        if results is None or results.name != RESULTS_DIR:
            return
        self.run_dir = results.parent
        if self.tools is None:
            terminalreporter.line(f"allure HTML: not rendered: {self.problem}")
        else:
            terminalreporter.line(
                f"allure HTML: rendered after the run into {self.run_dir / REPORT_DIR} "
                f"(view it: dra-conformance report {self.run_dir.name} --serve)"
            )

    def render_now(self, echo: Callable[[str], None]) -> Path | None:
        """Render the run's HTML; a failure is one line through `echo`, never the run's failure."""
        if self.run_dir is None or self.tools is None or not (self.run_dir / RESULTS_DIR).is_dir():
            return None
        try:
            return render(self.run_dir, self.tools, self.cache_dir)
        except (ConformanceError, OSError) as error:  # OSError: the cache or the run's directory is not writable
            echo(f"allure HTML: not rendered: {error}")
            return None

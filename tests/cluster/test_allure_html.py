"""`dra-conformance run` renders its Allure results as HTML people open, and a browser shows the run's tests.

A few authorization-matrix cells run through the CLI against this session's local cluster; the run renders
`allure-report/` with Allure 3 (Node.js, no Java). The report is served on 127.0.0.1 (it fetches its data, which
browsers refuse on file://) and Debian's headless Chromium, installed through the project's Debian-package
installer, takes a screenshot into the run's reports (`allure-report-screenshot.png`) and dumps the rendered DOM.
"""

from __future__ import annotations

import html
import json
import os
import struct
import subprocess
import sys
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.backends.local import host_packages
from dra_conformance.errors import UsageError
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.report import allure_html
from dra_wire.cache import default_cache_dir

CHROMIUM = "/usr/bin/chromium"
# The matrix cells of the controller identity: three rows, each in every served resource.k8s.io version.
CELLS = "controller"
WINDOW = (1400, 900)
# Flags a headless Chromium needs here: root needs --no-sandbox; the machine reaches no Google host, so every
# background connection is off; a fresh profile per start.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # Virtual time runs until the page is idle (its data fetched and drawn) or this many ms have passed.
    "--virtual-time-budget=15000",
)
# A cold Chromium start on a loaded 2-core machine takes seconds; two minutes guards a hung one.
CHROMIUM_TIMEOUT = 120.0
# The CLI run: start-up, attach to the running cluster, the RBAC environment (namespaces, identities with bound
# tokens) and nine cells on one worker, then `npm ci` (first time, ~10 s) and `allure generate` (seconds).
RUN_TIMEOUT = 240.0
# A blank 1400x900 page compresses to a few kB; a drawn report with its tree of tests is tens of kB.
MIN_SCREENSHOT_BYTES = 20_000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, installed through the project's own Debian-package installer when missing."""
    try:
        host_packages.install(allure_html.SCREENSHOT_PACKAGES, print, needed_by="the report screenshot test")
    except UsageError as error:
        if os.geteuid() != 0:
            pytest.skip(f"not applicable: {error}")
        raise
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing after installing {allure_html.SCREENSHOT_PACKAGES}"
    return CHROMIUM


@pytest.fixture(scope="module")
def user_cache() -> Path:
    """The user's tool cache, read before pytester points HOME at a temp dir (the warm Allure install is there)."""
    return default_cache_dir()


@pytest.fixture
def serve() -> Iterator[Callable[[Path], str]]:
    """Serves a report directory on 127.0.0.1 (a free port) and gives its URL; every server stops at teardown."""
    servers: list[ThreadingHTTPServer] = []

    def _serve(report_dir: Path) -> str:
        server = allure_html.report_server(report_dir)
        servers.append(server)
        threading.Thread(target=server.serve_forever, name="allure-report-server", daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield _serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path} is not a PNG: {data!r}"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT,
        check=False,
    )


def _junit_names(junit: Path) -> list[str]:
    return sorted(case.attrib["name"] for case in ElementTree.parse(junit).getroot().iter("testcase"))


def _report_data(report: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((report / "data").rglob("*.json")))


def _result_ids(report: Path) -> dict[str, str]:
    """Test name -> the id the report's page of that test has (`#/<id>`)."""
    found = [json.loads(p.read_text()) for p in (report / "data" / "test-results").glob("*.json")]
    return {result["name"]: result["id"] for result in found}


def test_a_run_renders_html_that_a_browser_shows_with_the_runs_tests(
    pytester: pytest.Pytester,
    cluster: ClusterInfo,
    pytestconfig: pytest.Config,
    chromium: str,
    serve: Callable[[Path], str],
    user_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if cluster.backend != "local":
        pytest.skip("not applicable: attaches a CLI run to the local cluster's state directory")
    tools, problem = allure_html.find_node()
    if tools is None:
        pytest.skip(f"not applicable: {problem}")
    state_dir = pytestconfig.invocation_params.dir / cluster.details["state_dir"]
    reports = pytester.path / "reports"
    profile = pytestconfig.getoption("--dra-profile")
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache.parent))  # the CLI's cache: $XDG_CACHE_HOME/dra-conformance
    result = pytester.run(
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "-n",
        "1",
        *([f"--profile={profile}"] if profile else []),
        f"--dra-state-dir={state_dir}",
        f"--dra-reports-dir={reports}",
        "-p",
        "no:cacheprovider",
        "-k",
        CELLS,
        str(paths.suites_dir() / "rbac" / "test_matrix.py"),
        timeout=RUN_TIMEOUT,
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, output[-3000:]
    runs = sorted(p.parent for p in reports.glob(f"*/{allure_html.RESULTS_DIR}"))
    assert len(runs) == 1, f"expected one run under {reports}: {runs}"
    run = runs[0]
    report = run / allure_html.REPORT_DIR
    assert f"allure HTML: rendered after the run into {report}" in output, output[-3000:]
    assert (report / "index.html").is_file(), f"no HTML rendered: {sorted(p.name for p in run.iterdir())}"

    names = _junit_names(run / "junit.xml")
    assert len(names) >= 3 and all(CELLS in name for name in names), f"cells the run ran: {names}"
    data = _report_data(report)
    absent = [name for name in names if json.dumps(name)[1:-1] not in data]
    assert not absent, f"tests of the run missing from the rendered report's data: {absent}"
    globals_widget = (report / "widgets" / "globals.json").read_text()
    assert "authorization matrix" in globals_widget, f"the matrix table is not a global attachment: {globals_widget}"

    url = serve(report)
    # The opening view: the certification verdict and the canary gate's rules, as the report's quality gates.
    opening = f"{url}{allure_html.OPENING_VIEW}"
    verdict = json.loads((run / "summary.json").read_text())["verdict"]
    shown = html.unescape(_chromium(chromium, pytester.path / "chromium-gate", "--dump-dom", opening).stdout)
    assert "certification verdict" in shown and f"{verdict}:" in shown, f"{opening} does not open with {verdict!r}"
    screenshot = run / "allure-report-screenshot.png"
    shot = _chromium(chromium, pytester.path / "chromium-shot", f"--screenshot={screenshot}", opening)
    assert screenshot.is_file(), f"chromium wrote no screenshot (exit {shot.returncode}): {shot.stderr[-2000:]}"
    assert _png_size(screenshot) == WINDOW, f"{screenshot}: {_png_size(screenshot)}, window {WINDOW}"
    size = screenshot.stat().st_size
    assert size >= MIN_SCREENSHOT_BYTES, f"{screenshot} is {size} bytes: a blank page?"

    # The overview shows the suites' tree folded; a test's own page shows its name once its data was fetched.
    ids = _result_ids(report)
    name = names[0]
    assert name in ids, f"{name} has no page in the report; pages: {sorted(ids)}"
    page = f"{url}#/{ids[name]}"
    dom = _chromium(chromium, pytester.path / "chromium-dom", "--dump-dom", page)
    assert name in html.unescape(dom.stdout), f"{page} does not show {name}; its DOM ends: {dom.stdout[-1500:]}"
    test_shot = run / "allure-report-test-screenshot.png"
    _chromium(chromium, pytester.path / "chromium-test-shot", f"--screenshot={test_shot}", page)
    assert test_shot.is_file() and _png_size(test_shot) == WINDOW, f"no screenshot of {page}"
    print(f"screenshots: {screenshot} ({size} bytes), {test_shot}; tests in the report: {names}")

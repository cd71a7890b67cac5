"""A driver instance that stops answering GetInfo is a finding with its node and window (`run.driver-answers`)."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_conformance.driver.answers import (
    ANSWER_MARGIN,
    DRIVER_ANSWERS,
    PROBE_DEADLINE,
    SILENT_PROBES,
    DriverAnswerWatch,
    Silence,
    get_info_probe,
)
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.plugin.silence_citations import cite_silences
from dra_conformance.report.certification import render_markdown, summarize
from dra_conformance.report.harness_errors import HARNESS_ERROR
from dra_conformance.verdict import CheckResult, Outcome, RunFacts
from dra_wire.kubelet_api import load
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2 as registration
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2_grpc as registration_grpc

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
DRIVER = "gpu.example.com"
FACTS = RunFacts("0.1.0", "local", "v1.37.2", DRIVER, "p.yaml", "abc", "2.0.0", ())
# A probe of a hung server ends at its deadline; the test gives it a short one so it ends fast.
TEST_DEADLINE = 0.3
# How long the test's hung handler waits to be released (it is released in teardown, long before this).
HANDLER_HOLD = 30.0


def _watch(*nodes: str) -> DriverAnswerWatch:
    endpoints = [DriverEndpoint(DRIVER, node, Path("/nowhere")) for node in nodes]
    watch = DriverAnswerWatch(endpoints, lambda endpoint, deadline: ("", False))
    watch._last_answer = {node: T0 for node in nodes}
    return watch


def test_a_silence_is_a_finding_after_enough_unanswered_probes_and_ends_at_the_next_answer() -> None:
    watch = _watch("kwok-node-0", "kwok-node-1")
    late = "DEADLINE_EXCEEDED: deadline passed"
    for i in range(1, SILENT_PROBES):
        watch.note("kwok-node-0", T0 + timedelta(seconds=2 * i), late, timed_out=True)
    assert watch.findings() == [], f"{SILENT_PROBES - 1} unanswered probes are a late answer, not a hung driver"
    watch.note("kwok-node-0", T0 + timedelta(seconds=2 * SILENT_PROBES), late, timed_out=True)
    watch.note("kwok-node-1", T0 + timedelta(seconds=2 * SILENT_PROBES))
    watch.note("kwok-node-0", T0 + timedelta(seconds=30), "UNAVAILABLE: connection refused")
    [open_silence] = watch.findings()
    assert (open_silence.node, open_silence.since, open_silence.until) == ("kwok-node-0", T0, None), open_silence
    assert "until the end of the run" in open_silence.describe(), open_silence.describe()
    watch.note("kwok-node-0", T0 + timedelta(seconds=62))
    [silence] = watch.findings()
    assert silence.until == T0 + timedelta(seconds=62) and silence.unanswered == SILENT_PROBES, silence
    assert silence.describe().startswith("the driver on kwok-node-0 did not answer from 12:00:00 to 12:01:02 ("), (
        silence.describe()
    )


def test_a_silence_covers_checks_during_it_and_shortly_after_but_not_before_or_long_after() -> None:
    silence = Silence("kwok-node-0", T0, "x", until=T0 + timedelta(seconds=60), unanswered=30)
    assert silence.overlaps(T0 - timedelta(seconds=50), T0 + timedelta(seconds=1)), "a check pending when it hung"
    assert silence.overlaps(T0 + timedelta(seconds=60) + ANSWER_MARGIN, T0 + timedelta(seconds=90))
    assert not silence.overlaps(T0 - timedelta(seconds=10), T0 - timedelta(seconds=1))
    assert not silence.overlaps(T0 + timedelta(seconds=61) + ANSWER_MARGIN, T0 + timedelta(seconds=90))


def test_a_silence_decides_the_verdict_and_is_named_with_its_node_window_and_the_checks_citing_it(
    tmp_path: Path,
) -> None:
    silence = Silence("kwok-node-0", T0, "DEADLINE_EXCEEDED", unanswered=SILENT_PROBES)
    # Cited while the silence was still open: the citation holds once it has ended.
    cited = f"DEADLINE_EXCEEDED [{silence.citation()}]"
    silence.until = T0 + timedelta(seconds=60)
    results = [
        CheckResult("suites/protocol/test_p.py::harness", Outcome.FAILED, cited, (), DRIVER_ANSWERS),
        CheckResult("suites/protocol/test_p.py::prepare", Outcome.FAILED, cited, (), "protocol.valid-claim-prepares"),
        CheckResult("suites/protocol/test_p.py::passed", Outcome.PASSED),
    ]
    summary = summarize(results, FACTS, tmp_path, driver_silences=[silence.to_json()])
    assert summary["verdict"] == "not certified", summary["reasons"]
    assert summary["reasons"][:2] == [
        f"{DRIVER_ANSWERS}: the driver on kwok-node-0 did not answer from 12:00:00 to 12:01:00 ({SILENT_PROBES} "
        f"GetInfo probes unanswered within {PROBE_DEADLINE:g} s: DEADLINE_EXCEEDED)",
        f"2 check(s) failed: {DRIVER_ANSWERS} (1 check), protocol.valid-claim-prepares (1 check)",
    ], summary["reasons"]
    [section] = summary["driver_silences"]
    assert (section["node"], section["from"], section["to"]) == (
        "kwok-node-0",
        "2026-12-05T12:00:00+00:00",
        "2026-12-05T12:01:00+00:00",
    ), section
    assert section["checks"] == ["suites/protocol/test_p.py::harness", "suites/protocol/test_p.py::prepare"], section
    markdown = render_markdown(summary)
    assert f"## The driver did not answer ({DRIVER_ANSWERS}): the driver on kwok-node-0" in markdown, markdown
    passed = summarize([results[2]], FACTS, tmp_path)
    assert passed["driver_silences"] == [] and passed["verdict"] == "certified", passed["reasons"]
    obligation = Registry.load()[DRIVER_ANSWERS]
    assert obligation.basis == Basis.CONTRACT and obligation.sources, obligation


def test_checks_that_failed_within_a_silence_cite_it_and_what_no_obligation_named_is_the_silences() -> None:
    silence = Silence("kwok-node-0", T0, "DEADLINE_EXCEEDED", until=T0 + timedelta(seconds=60), unanswered=30)
    blip = Silence("kwok-node-1", T0, "DEADLINE_EXCEEDED", until=T0 + timedelta(seconds=60), unanswered=1)
    during = ((T0 - timedelta(seconds=5)).timestamp(), (T0 + timedelta(seconds=40)).timestamp())
    before = ((T0 - timedelta(seconds=90)).timestamp(), (T0 - timedelta(seconds=80)).timestamp())
    results = [
        CheckResult("suites/p/t.py::harness", Outcome.ERROR, "DEADLINE_EXCEEDED", (), HARNESS_ERROR, "", "tb"),
        CheckResult("suites/p/t.py::prepare", Outcome.FAILED, "prepare failed", (), "protocol.valid-claim-prepares"),
        CheckResult("suites/p/t.py::before", Outcome.ERROR, "KeyError: 'x'", (), HARNESS_ERROR),
        CheckResult("suites/p/t.py::passed", Outcome.PASSED),
    ]
    spans = {"suites/p/t.py::before": before} | {
        r.nodeid: during for r in results if r.nodeid != "suites/p/t.py::before"
    }
    cited = {r.nodeid.rsplit("::", 1)[1]: r for r in cite_silences(results, [blip, silence], spans)}
    citation = f" [{silence.citation()}]"
    assert (cited["harness"].outcome, cited["harness"].obligation, cited["harness"].reason) == (
        Outcome.FAILED,
        DRIVER_ANSWERS,
        "DEADLINE_EXCEEDED" + citation,
    ), cited["harness"]
    assert cited["prepare"].obligation == "protocol.valid-claim-prepares", cited["prepare"]
    assert cited["prepare"].reason == "prepare failed" + citation, cited["prepare"]
    assert cited["before"] == results[2] and cited["passed"] == results[3], cited
    assert cite_silences(results, [blip], spans) == results, "a silence that is no finding is cited by none"


class _Registration(registration_grpc.RegistrationServicer):
    """Answers GetInfo, or holds it until released (a hung driver)."""

    def __init__(self) -> None:
        self.hung = False
        self.release = threading.Event()

    def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        if self.hung:
            self.release.wait(HANDLER_HOLD)
        return registration.PluginInfo(type="DRAPlugin", name=DRIVER, supported_versions=["v1.DRAPlugin"])

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        return registration.RegistrationStatusResponse()


@pytest.fixture
def registration_server() -> Iterator[tuple[DriverEndpoint, _Registration]]:
    # A unix socket path has at most 107 characters: pytest's tmp_path under xdist can be longer.
    with tempfile.TemporaryDirectory(prefix="answers-", dir="/tmp") as root:
        endpoint = DriverEndpoint(DRIVER, "kwok-node-0", Path(root))
        endpoint.registrar_dir.mkdir()
        servicer = _Registration()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        registration_grpc.add_RegistrationServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix://{endpoint.registration_socket}")
        server.start()
        try:
            yield endpoint, servicer
        finally:
            servicer.release.set()
            server.stop(grace=None)


def test_the_probe_tells_a_hung_driver_from_an_answering_one_and_from_one_not_listening(
    registration_server: tuple[DriverEndpoint, _Registration], tmp_path: Path
) -> None:
    endpoint, servicer = registration_server
    probe = get_info_probe(load())
    assert probe(endpoint, TEST_DEADLINE) == ("", False)
    servicer.hung = True
    problem, deadline = probe(endpoint, TEST_DEADLINE)
    assert deadline and problem.startswith("DEADLINE_EXCEEDED"), problem
    gone = DriverEndpoint(DRIVER, "kwok-node-1", tmp_path / "nothing-here")
    problem, deadline = probe(gone, TEST_DEADLINE)
    assert problem and not deadline, f"nothing listening is not silence: {problem}"

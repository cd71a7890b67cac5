"""One verdict from the parts of an in-cluster run, as `dra-conformance sonobuoy results` reads a retrieved tarball."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import cli, paths
from dra_conformance.driver.answers import DRIVER_ANSWERS, SILENT_PROBES, Silence
from dra_conformance.driver.profile import load_profile
from dra_conformance.report.certification import SUMMARY_JSON
from dra_conformance.report.fleet.sources import read_inputs
from dra_conformance.sonobuoy import entry, protocol, retrieved, runner
from dra_conformance.sonobuoy.merge import PartRun, combine, merge, merge_parts
from dra_conformance.sonobuoy.package import pod_profile
from dra_conformance.sonobuoy.part import RECORD_FILE, Part
from dra_conformance.sonobuoy.plugin import NODE_PLUGIN_NAME, PLUGIN_NAME
from dra_conformance.verdict.replay import replay

ROLLING = "suites/kubelet/test_rolling_update.py::test_rolling"
FOUR = "suites/kubelet/test_four_layers.py::test_four[all-four-green]"
SLICES = "suites/slices/test_slice_hygiene.py::test_hygiene"
METRICS = "suites/metrics/test_metrics_api.py::test_metrics"
CLUSTER_CHECKS = (SLICES, METRICS)
NODE_CHECKS = (ROLLING, FOUR)
DECLARED = ["rollingUpdate", "statusDevices"]


def _check(nodeid: str, outcome: str, reason: str = "", capabilities: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "nodeid": nodeid,
        "outcome": outcome,
        "reason": reason,
        "capabilities": list(capabilities),
        "obligation": "kubelet.rolling" if outcome == "failed" else "",
        "obligation_capability": "",
    }


def _run(
    selected: Part, outcomes: dict[str, str], finished: str, *, expression: str | None = None, node: str | None = None
) -> PartRun:
    capabilities = {ROLLING: ("rollingUpdate",), SLICES: ("statusDevices",)}
    checks = [
        _check(
            nodeid,
            outcome,
            "not applicable: not here" if outcome == "not applicable" else "boom" * (outcome == "failed"),
            capabilities.get(nodeid, ()),
        )
        for nodeid, outcome in outcomes.items()
    ]
    default = "node_level" if selected is Part.NODE else "not node_level"
    record = {
        "collected": sorted(outcomes),
        "filters": {"-k": "", "-m": default if expression is None else expression},
        "stopped": "",
        "checks": checks,
    }
    summary = {
        "verdict": "incomplete",
        "reasons": ["a subset of the bundled suites"],
        "run": {
            "suite_version": "0.1.0",
            "backend": "existing",
            "cluster_version": "v1.37.2",
            "driver": "gpu.example.com",
            "profile": "gpu.yaml",
            "profile_digest": "abc",
            "driver_version": "1.0",
            "declared": DECLARED,
            "harness_capabilities": ["referenceFaults"],
            "extra": {},
            "cluster": "lab-1",
            "finished_at": finished,
        },
        "tests": dict(outcomes),
        "totals": {},
        "advisories": [],
        "cluster_faults": [],
        "driver_exits": {"unexpected": [], "caused_by_checks": []},
        "accounting": {"suites_not_run": []},
        "capabilities": {},
        "suites": {},
        "canary_gate": {"state": "hold", "rules": []},
        "metrics_verdict": {"state": "not run"},
        "metrics_api_rollback": {"state": "not run"},
        "device_plugin_rollback": {"state": "not run"},
        "flake_record": {"state": "one run"},
        "read_exposure": {"state": "not checked"},
    }
    return PartRun(selected, node, summary, record)


def _cluster(**outcomes: str) -> PartRun:
    found = {SLICES: "passed", METRICS: "not applicable"}
    found.update(
        {nodeid: outcomes[key] for key, nodeid in (("slices", SLICES), ("metrics", METRICS)) if key in outcomes}
    )
    return _run(Part.CLUSTER, found, "2026-12-02T07:00:00+00:00")


def _node(
    node: str, rolling: str = "passed", four: str | None = "passed", finished: str = "2026-12-02T07:30:00+00:00"
) -> PartRun:
    outcomes = {ROLLING: rolling, **({FOUR: four} if four is not None else {})}
    return _run(Part.NODE, outcomes, finished, node=node)


def test_the_cluster_part_and_the_node_parts_certify_together_what_neither_certifies_alone() -> None:
    merged = merge_parts([_cluster(), _node("gpu-1"), _node("gpu-2")])
    assert merged is not None
    assert merged["verdict"] == "certified", merged["reasons"]
    assert merged["tests"] == {FOUR: "passed", METRICS: "not applicable", ROLLING: "passed", SLICES: "passed"}
    assert merged["capabilities"]["rollingUpdate"]["state"] == "passed"
    assert merged["run"]["finished_at"] == "2026-12-02T07:30:00+00:00", "the run ended with its last part"
    assert [(p["part"], p["node"]) for p in merged["parts"]] == [
        ("cluster", None),
        ("node", "gpu-1"),
        ("node", "gpu-2"),
    ]
    assert merged["canary_gate"] == {"state": "hold", "rules": []}, "sections read elsewhere are the cluster part's"
    alone = merge_parts([_cluster()])
    assert alone is not None and alone["verdict"] == "incomplete", "without a node part the node checks never ran"
    assert any("ran on no node" in reason for reason in alone["reasons"]), alone["reasons"]


def test_a_check_passes_only_if_it_passed_on_every_node_where_it_ran() -> None:
    merged = merge_parts([_cluster(), _node("gpu-1"), _node("gpu-2", rolling="failed")])
    assert merged is not None
    assert merged["verdict"] == "not certified", merged["reasons"]
    assert merged["tests"][ROLLING] == "failed"
    failed = merged["suites"]["kubelet"]["failed"]
    assert failed == [f"{ROLLING} (kubelet.rolling)"], failed
    found = combine(ROLLING, [("node gpu-1", None), ("node gpu-2", None)])
    assert found is None, "never finished anywhere: no result"


def test_a_check_is_not_applicable_only_where_it_is_not_applicable_everywhere() -> None:
    somewhere = merge_parts([_cluster(), _node("gpu-1", four="not applicable"), _node("gpu-2")])
    assert somewhere is not None and somewhere["tests"][FOUR] == "passed"
    everywhere = merge_parts([_cluster(), _node("gpu-1", four="not applicable"), _node("gpu-2", four="not applicable")])
    assert everywhere is not None and everywhere["tests"][FOUR] == "not applicable"
    assert everywhere["verdict"] == "certified", "not applicable with its reason certifies"


def test_a_check_a_node_collected_and_never_finished_did_not_run_and_the_run_is_incomplete() -> None:
    unfinished = _node("gpu-2")
    assert unfinished.record is not None
    unfinished.record["checks"] = [c for c in unfinished.record["checks"] if c["nodeid"] != FOUR]
    unfinished.record["stopped"] = "interrupted"
    merged = merge_parts([_cluster(), _node("gpu-1"), unfinished])
    assert merged is not None
    assert merged["verdict"] == "incomplete", merged["reasons"]
    assert FOUR not in merged["tests"] and merged["accounting"]["never_run"] == 1, merged["accounting"]
    assert any("node gpu-2: interrupted" in reason for reason in merged["reasons"]), merged["reasons"]


def test_a_part_that_ran_anything_but_its_own_selection_leaves_the_run_incomplete() -> None:
    narrowed = _run(Part.NODE, {ROLLING: "passed"}, "2026-12-02T07:30:00+00:00", expression="node_level and slow")
    merged = merge_parts([_cluster(), narrowed])
    assert merged is not None
    assert merged["verdict"] == "incomplete", merged["reasons"]
    assert any("ran -m 'node_level and slow'" in reason for reason in merged["reasons"]), merged["reasons"]


def test_a_part_without_a_summary_is_named_and_keeps_the_run_from_certifying() -> None:
    broken = PartRun(Part.NODE, "gpu-3", problem="No pod was scheduled on node gpu-3")
    merged = merge_parts([_cluster(), _node("gpu-1"), broken])
    assert merged is not None
    assert merged["verdict"] == "incomplete", merged["reasons"]
    assert merged["reasons"] == ["node gpu-3: no verdict (No pod was scheduled on node gpu-3)"]
    failing = merge_parts([_cluster(slices="failed"), broken, _node("gpu-1")])
    assert failing is not None and failing["verdict"] == "not certified", "a failure stays the verdict"
    assert merge_parts([broken]) is None, "no part wrote a summary: no verdict"


def test_an_error_in_a_part_summary_the_record_does_not_know_is_a_cluster_fault() -> None:
    cluster = _cluster()
    assert cluster.summary is not None
    cluster.summary["tests"][SLICES] = "error"
    merged = merge_parts([cluster, _node("gpu-1")])
    assert merged is not None and merged["tests"][SLICES] == "error" and merged["verdict"] == "incomplete"


def test_a_whole_run_is_its_own_verdict() -> None:
    whole = PartRun(Part.WHOLE, None, {"verdict": "certified", "run": {"driver": "d"}}, None)
    assert merge_parts([whole]) == whole.summary


def _member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _tarball(directory: Path, runs: list[PartRun], errors: dict[str, str] | None = None) -> Path:
    """A tarball laid out as `sonobuoy retrieve` writes one (each part's files where the aggregator unpacks them)."""
    path = directory / "202612020800_sonobuoy_2b4e.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for run in runs:
            plugin_name, where = (NODE_PLUGIN_NAME, run.node) if run.part is Part.NODE else (PLUGIN_NAME, "global")
            base = f"plugins/{plugin_name}/results/{where}"
            _member(archive, f"{base}/{entry.PART_SUMMARY_JSON}", json.dumps(run.summary).encode())
            _member(archive, f"{base}/{RECORD_FILE}", json.dumps(run.record).encode())
            _member(archive, f"{base}/junit.xml", b"<testsuites/>")
        for node, error in (errors or {}).items():
            _member(
                archive, f"plugins/{NODE_PLUGIN_NAME}/errors/{node}/error.json", json.dumps({"error": error}).encode()
            )
        _member(archive, "meta/run.log", b"aggregator log")
    return path


def test_sonobuoy_results_prints_the_merged_verdict_each_part_and_where_each_check_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tarball(tmp_path, [_cluster(), _node("gpu-1")], errors={"gpu-2": "No pod was scheduled on node gpu-2"})
    code = cli.main(["sonobuoy", "results", str(tmp_path)])
    shown = capsys.readouterr().out
    assert code == runner.EXIT_NOT_CERTIFIED, shown
    assert "verdict: incomplete (gpu.example.com, profile gpu.yaml)" in shown, shown
    assert "node gpu-2: no verdict (" in shown and "No pod was scheduled on node gpu-2" in shown, shown
    lines = {line.split()[1]: line.split() for line in shown.splitlines() if line.startswith("  ") and "::" in line}
    assert lines[ROLLING][0] == "passed" and lines[ROLLING][2:] == ["(node", "gpu-1)"], lines[ROLLING]
    assert lines[SLICES][2:] == ["(cluster)"], lines[SLICES]


def test_the_merged_verdict_written_beside_the_tarball_is_the_one_run_the_fleet_report_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = _tarball(tmp_path, [_cluster(), _node("gpu-1")])
    code = runner.report(tarball, tmp_path / retrieved.VERDICT_DIR, lambda _: None)
    assert code == runner.EXIT_CERTIFIED
    found = read_inputs([tmp_path]).summaries
    assert [(s.source, s.document["verdict"]) for s in found] == [
        (str(tmp_path / retrieved.VERDICT_DIR / SUMMARY_JSON), "certified")
    ], "the parts' summaries are no summary.json: the fleet report must not take a part for the run"


def test_a_tarball_without_our_plugins_and_a_missing_path_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "202612020800_sonobuoy_other.tar.gz"
    with tarfile.open(other, "w:gz") as archive:
        _member(archive, "plugins/e2e/results/global/junit.xml", b"<testsuites/>")
    for path, said in ((other, "no results of plugin dra-conformance"), (tmp_path / "none", "no such file")):
        assert cli.main(["sonobuoy", "results", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, err


def test_a_part_tarball_holds_its_summary_as_part_summary_and_its_record_and_says_it_is_a_part(tmp_path: Path) -> None:
    run_dir = tmp_path / "reports" / "20261202-070000-ab12"
    run_dir.mkdir(parents=True)
    summary = _node("gpu-1").summary
    (run_dir / SUMMARY_JSON).write_text(json.dumps(summary))
    (run_dir / "summary.md").write_text("# x\n")
    record = tmp_path / "reports" / RECORD_FILE
    record.write_text(json.dumps(_node("gpu-1").record))
    outcome = entry.RunOutcome(exit_code=0, run_dir=run_dir)
    result_file, verdict = entry.deliver(tmp_path, outcome, None, Part.NODE, "gpu-1", record)
    assert verdict, "a part's results carry its checks"
    with tarfile.open(result_file) as packed:
        names = set(packed.getnames())
    assert {entry.PART_SUMMARY_JSON, RECORD_FILE, protocol.RESULTS_FILE} <= names and SUMMARY_JSON not in names, names
    document = yaml.safe_load((run_dir / protocol.RESULTS_FILE).read_text())
    assert document["status"] == entry.PART_STATUS and document["items"][0]["status"] == entry.PART_STATUS
    assert document["items"][0]["name"].startswith("node-level part (node gpu-1)"), document["items"][0]["name"]
    assert not any(s in entry.PART_STATUS for s in protocol.CUSTOM_STATUS_SEPARATORS)


SHIPPED = paths.CHECKOUT / "fixtures" / "profiles" / "reference-driver-shipped.yaml"
UPSTREAM = paths.CHECKOUT / "fixtures" / "profiles" / "upstream-test-driver.yaml"


def test_the_profile_is_packaged_with_its_files_flat_and_without_what_names_this_machine(tmp_path: Path) -> None:
    staged, changes = pod_profile(SHIPPED, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rbac.yaml", SHIPPED.name]
    raw = yaml.safe_load(staged.read_text())
    assert "install" not in raw and raw["identity"]["rbac"] == ["rbac.yaml"], raw
    assert (tmp_path / "rbac.yaml").read_text() == (
        SHIPPED.parent / "../shipped/reference-driver/rbac.yaml"
    ).read_text()
    loaded, original = load_profile(staged), load_profile(SHIPPED)
    assert (loaded.driver, loaded.capabilities, loaded.nodes) == (
        original.driver,
        original.capabilities,
        original.nodes,
    )
    assert any("install" in change for change in changes) and any("rbac.yaml" in change for change in changes)


def test_a_profile_that_mounts_as_it_is_is_copied_byte_for_byte(tmp_path: Path) -> None:
    plain = tmp_path / "source"
    plain.mkdir()
    raw = yaml.safe_load(UPSTREAM.read_text())
    raw.pop("run")
    (plain / "driver.yaml").write_text(yaml.safe_dump(raw))
    (plain / "upstream-test-driver-rbac.yaml").write_text(
        (UPSTREAM.parent / "upstream-test-driver-rbac.yaml").read_text()
    )
    staged, changes = pod_profile(plain / "driver.yaml", tmp_path / "staged")
    assert changes == [] and staged.read_bytes() == (plain / "driver.yaml").read_bytes()
    assert load_profile(staged).digest == load_profile(plain / "driver.yaml").digest


def test_sonobuoy_run_without_a_readable_cluster_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["sonobuoy", "run", "--profile", str(SHIPPED), "--cluster-name", "lab-1", "--kubeconfig", str(tmp_path / "kc")]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "kubeconfig" in err, err
    with pytest.raises(SystemExit) as exited:
        cli.main(["sonobuoy", "run", "--cluster-name", "lab-1"])
    assert exited.value.code == 2 and "--profile" in capsys.readouterr().err


def test_the_kubeconfig_is_the_one_kubectl_and_sonobuoy_read() -> None:
    assert runner.kubeconfig_path(Path("/given"), {"KUBECONFIG": "/a:/b"}) == Path("/given")
    assert runner.kubeconfig_path(None, {"KUBECONFIG": "/a:/b"}) == Path("/a")
    assert runner.kubeconfig_path(None, {}) == Path.home() / ".kube" / "config"


def test_the_merged_summary_md_lists_the_parts_it_merges(tmp_path: Path) -> None:
    merged = merge([_cluster(), _node("gpu-1")])
    assert merged is not None
    markdown = (retrieved.write_verdict(merged, tmp_path) / "summary.md").read_text()
    assert "| node | gpu-1 | incomplete |" in markdown and "| cluster |  | incomplete |" in markdown, markdown


def test_a_kubeconfig_that_is_no_local_clusters_admin_kubeconfig_is_not_ours(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    assert runner.local_cluster(kubeconfig) is None


def test_a_part_in_which_the_driver_stopped_answering_decides_the_merged_verdict() -> None:
    node = _node("gpu-1")
    assert node.summary is not None
    silence = Silence("gpu-1", datetime(2026, 12, 2, 7, 10, tzinfo=UTC), "DEADLINE_EXCEEDED", unanswered=SILENT_PROBES)
    node.summary["driver_silences"] = [{**silence.to_json(), "checks": []}]
    merged = merge_parts([_cluster(), node, _node("gpu-2")])
    assert merged is not None
    assert merged["verdict"] == "not certified", merged["reasons"]
    assert merged["reasons"][0].startswith(f"{DRIVER_ANSWERS}: ") and silence.describe() in merged["reasons"][0], (
        merged["reasons"]
    )
    assert [x["node"] for x in merged["driver_silences"]] == ["gpu-1"], merged["driver_silences"]
    assert merge_parts([_cluster(), _node("gpu-1"), _node("gpu-2")])["driver_silences"] == []  # type: ignore[index]


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param(lambda: [_cluster(), _node("gpu-1"), _node("gpu-2")], id="certified"),
        pytest.param(lambda: [_cluster(), _node("gpu-1", rolling="failed")], id="not-certified"),
        pytest.param(
            lambda: [_cluster(), _node("gpu-1"), PartRun(Part.NODE, "gpu-3", problem="No pod was scheduled")],
            id="a-part-without-a-verdict",
        ),
    ],
)
def test_the_merged_run_records_its_findings_and_dra_conformance_verdict_decides_it_again_alike(
    parts: Any, tmp_path: Path
) -> None:
    merged = merge(parts())
    assert merged is not None and merged.findings is not None
    retrieved.write_verdict(merged, tmp_path)
    again = replay(tmp_path)
    assert (str(again.verdict), again.recorded) == (merged.summary["verdict"],) * 2, (
        f"merged: {merged.summary['verdict']} {merged.summary['reasons']}; decided again: {again.verdict} "
        f"{again.reasons}"
    )

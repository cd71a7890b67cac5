"""The rights the suites need: the shipped ClusterRole, the one-line refusal, and the suites skipped without them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from dra_conformance import cli, paths
from dra_conformance.kube import kinds, kubeconfig, preflight
from dra_conformance.kube.preflight import RightsCheck, check_rights
from dra_conformance.kube.rights import (
    CLUSTER_ROLE_MANIFEST,
    COMMON_RIGHTS,
    ESCALATION_RIGHTS,
    RESOURCE,
    SUITE_RIGHTS,
    Right,
    describe_missing,
    escalatable_rights,
    missing_from_json,
    missing_groups,
    missing_to_json,
    needed_rights,
    render_manifest,
    skip_reasons,
    suite_of,
)
from dra_conformance.rbac.environment import CLAIM_RULES

CREATE_CLASSES = Right("create", "deviceclasses", RESOURCE, namespaced=False)
CREATE_CLUSTER_ROLES = Right("create", "clusterroles", "rbac.authorization.k8s.io", namespaced=False)
CREATE_NAMESPACES = Right("create", "namespaces", namespaced=False)
# The suites that create DeviceClasses: every one but metrics.
CLASS_CREATORS = (
    "allocation",
    "binding",
    "capacity",
    "explore",
    "kubelet",
    "partitions",
    "protocol",
    "rbac",
    "rollback",
    "status",
    "taints",
)


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule; resourceNames are ignored (the shipped role grants every name)."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _triples(rights: Any) -> set[tuple[str, str, str]]:
    return {(right.group, right.rule_resource, right.verb) for right in rights}


# --- the shipped ClusterRole --------------------------------------------------------------------------------------


def test_shipped_cluster_role_grants_exactly_the_rights_the_suites_need() -> None:
    role = yaml.safe_load(CLUSTER_ROLE_MANIFEST.read_text())
    assert role["kind"] == "ClusterRole", role
    shipped, needed = _granted(role["rules"]), _triples(needed_rights())
    assert shipped == needed, f"only in the manifest: {shipped - needed}; only in rights.py: {needed - shipped}"


def test_shipped_cluster_role_is_what_rights_py_renders() -> None:
    assert CLUSTER_ROLE_MANIFEST.read_text() == render_manifest(), (
        "regenerate it: python -m dra_conformance.kube.rights > dra_conformance/kube/ci-clusterrole.yaml"
    )


def test_shipped_cluster_role_grants_neither_escalate_nor_bind() -> None:
    role = yaml.safe_load(CLUSTER_ROLE_MANIFEST.read_text())
    assert not _granted(role["rules"]) & _triples(ESCALATION_RIGHTS)


def test_every_role_the_rbac_suite_creates_grants_only_what_the_identity_is_asked_to_hold() -> None:
    """RBAC escalation prevention: the identity must hold what the roles it creates grant (or may escalate)."""
    driver_role = next(
        doc for doc in yaml.safe_load_all(paths.reference_driver_rbac().read_text()) if doc["kind"] == "ClusterRole"
    )
    overprivileged = yaml.safe_load(paths.overprivileged_driver_role().read_text())
    granted = _granted(driver_role["rules"]) | _granted(overprivileged["rules"]) | _granted(CLAIM_RULES)
    held = _triples((*COMMON_RIGHTS, *SUITE_RIGHTS["rbac"]))
    assert granted <= held, f"granted by the rbac suite's roles but not asked of the identity: {granted - held}"


def test_namespaced_flags_agree_with_the_kinds_table() -> None:
    scopes = {
        (api_version.rpartition("/")[0], plural): scoped for (api_version, _), (plural, scoped) in kinds.KINDS.items()
    }
    wrong = [
        str(right)
        for right in needed_rights()
        if (right.group, right.resource) in scopes and scopes[(right.group, right.resource)] != right.namespaced
    ]
    assert not wrong, wrong


def test_rights_only_granted_are_excused_by_escalation_and_rights_used_directly_are_not() -> None:
    excused = escalatable_rights()
    assert Right("arbitrary-node:patch", "resourceclaims", RESOURCE, "driver") in excused
    assert Right("update", "resourceclaims", RESOURCE, "status") in excused
    assert Right("create", "resourceclaims", RESOURCE) not in excused  # the suites create claims themselves
    assert Right("list", "resourceslices", RESOURCE, namespaced=False) not in excused


def test_the_issue_20_identity_is_caught() -> None:
    """Rights to namespaces, pods, events, nodes, claims, templates and slices, none to DeviceClasses or RBAC."""
    held = {"namespaces", "pods", "events", "nodes", "resourceclaims", "resourceclaimtemplates", "resourceslices"}
    missing = {right: suites for right, suites in needed_rights().items() if right.resource not in held}
    assert CREATE_CLASSES in missing
    assert CREATE_CLUSTER_ROLES in missing
    assert set(missing[CREATE_CLASSES]) == set(CLASS_CREATORS)
    assert missing[CREATE_CLUSTER_ROLES] == ("rbac",)


# --- the refusal --------------------------------------------------------------------------------------------------


def test_refusal_is_one_line_naming_each_missing_right_its_suites_and_the_ways_on() -> None:
    needed = needed_rights()
    delete_classes = Right("delete", "deviceclasses", RESOURCE, namespaced=False)
    check = RightsCheck(
        "https://10.0.0.1:6443",
        Path("ci.kubeconfig"),
        "alice",
        {right: needed[right] for right in (CREATE_CLASSES, delete_classes)},
    )
    assert str(check.refusal()) == (
        "cluster https://10.0.0.1:6443 (kubeconfig ci.kubeconfig) is not usable: the suite's identity alice lacks: "
        "create/delete deviceclasses.resource.k8s.io "
        "(allocation, binding, capacity, explore, kubelet, partitions, protocol, rbac, rollback, status, taints); "
        f"grant the ClusterRole in {CLUSTER_ROLE_MANIFEST} "
        "or pass --allow-partial (pytest: --dra-allow-partial) to skip the checks that need them"
    )
    assert check.fatal == {}


def test_refusal_lists_every_missing_right_at_once_one_indented_line_per_group_of_suites() -> None:
    needed = needed_rights()
    check = RightsCheck(
        "https://10.0.0.1:6443",
        Path("ci.kubeconfig"),
        "alice",
        {right: needed[right] for right in (CREATE_CLASSES, CREATE_CLUSTER_ROLES)},
    )
    assert str(check.refusal()).splitlines() == [
        "cluster https://10.0.0.1:6443 (kubeconfig ci.kubeconfig) is not usable: the suite's identity alice lacks "
        f"2 rights; grant the ClusterRole in {CLUSTER_ROLE_MANIFEST} or pass --allow-partial "
        "(pytest: --dra-allow-partial) to skip the checks that need them:",
        "  for allocation, binding, capacity, explore, kubelet, partitions, protocol, rbac, rollback, status, taints: "
        "create deviceclasses.resource.k8s.io",
        "  for rbac: create clusterroles.rbac.authorization.k8s.io",
    ]


def test_a_missing_right_every_suite_needs_is_fatal_and_the_refusal_does_not_offer_allow_partial() -> None:
    needed = needed_rights()
    get_nodes = Right("get", "nodes", namespaced=False)
    check = RightsCheck(
        "https://h", Path("k"), "bob", {right: needed[right] for right in (CREATE_NAMESPACES, get_nodes)}
    )
    assert list(check.fatal) == [CREATE_NAMESPACES]
    lines = str(check.refusal()).splitlines()
    assert lines[0].endswith(
        f"lacks 2 rights; grant the ClusterRole in {CLUSTER_ROLE_MANIFEST} "
        "(--allow-partial cannot help: no suite runs without the rights every suite needs):"
    ), lines
    assert lines[1:] == ["  for every suite: create namespaces", "  for kubelet, protocol, rbac, rollback: get nodes"]


def test_an_identity_lacking_every_right_is_refused_naming_each_one_once() -> None:
    needed = needed_rights()
    lines = str(RightsCheck("https://h", Path("k"), "nobody", needed).refusal()).splitlines()
    assert f"lacks {len(needed)} rights" in lines[0], lines[0]
    assert lines[1].startswith("  for every suite: create/get/delete namespaces, get serviceaccounts, list nodes"), (
        lines
    )
    listed = [(line.split(": ", 1)[0].removeprefix("  for "), line.split(": ", 1)[1]) for line in lines[1:]]
    assert listed == missing_groups(needed)
    named = sum(len(resource.split(", ")) for _, resource in listed)
    verbs = sum(len(entry.split(" ", 1)[0].split("/")) for _, rights in listed for entry in rights.split(", "))
    assert verbs == len(needed) and named <= len(needed), (verbs, named, len(needed))


@pytest.mark.parametrize(
    ("rights", "text"),
    [
        ((CREATE_NAMESPACES, Right("get", "namespaces", namespaced=False)), "create/get namespaces (every suite)"),
        (
            (CREATE_CLASSES, Right("list", "events"), Right("delete", "deviceclasses", RESOURCE, namespaced=False)),
            "create/delete deviceclasses.resource.k8s.io, list events (every suite)",
        ),
        (
            (Right("get", "pods", subresource="exec"), Right("get", "pods")),
            "get pods/exec, get pods (every suite)",
        ),
    ],
)
def test_verbs_of_one_resource_are_joined(rights: tuple[Right, ...], text: str) -> None:
    assert describe_missing(dict.fromkeys(rights, tuple(SUITE_RIGHTS))) == text


@pytest.mark.parametrize(
    ("right", "text"),
    [
        (CREATE_CLASSES, "create deviceclasses.resource.k8s.io"),
        (Right("create", "serviceaccounts", subresource="token"), "create serviceaccounts/token"),
        (Right("patch", "resourceclaims", RESOURCE, "status"), "patch resourceclaims.resource.k8s.io/status"),
        (Right("list", "events"), "list events"),
    ],
)
def test_a_right_reads_as_verb_and_resource(right: Right, text: str) -> None:
    assert str(right) == text


# --- asking the API server ------------------------------------------------------------------------------------------


@pytest.fixture
def answering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A kubeconfig, and an API server (faked) that allows every right but those the test denies."""
    path = kubeconfig.write(
        tmp_path / "ci.kubeconfig", kubeconfig.render("https://10.0.0.1:6443", b"not a real CA", user="ci", token="t")
    )
    denied: set[Right] = set()
    asked: list[dict[str, str]] = []
    groups = ["system:serviceaccounts", "system:authenticated"]

    def review(_api: Any, attributes: dict[str, str]) -> Any:
        asked.append(attributes)
        refused = {str(right) for right in denied if right.review_attributes() == attributes}
        return SimpleNamespace(status=SimpleNamespace(allowed=not refused))

    monkeypatch.setattr(preflight, "_who_am_i", lambda _api, _ask: ("system:serviceaccount:ci:runner", groups))
    monkeypatch.setattr(preflight, "_access_review", review)
    return SimpleNamespace(path=path, denied=denied, asked=asked, groups=groups)


def test_check_rights_asks_for_every_right_and_reports_the_denied_ones(answering: Any) -> None:
    answering.denied.update({CREATE_CLASSES, CREATE_CLUSTER_ROLES})
    check = check_rights(answering.path)
    assert check.user == "system:serviceaccount:ci:runner"
    assert check.server == "https://10.0.0.1:6443"
    assert list(check.missing) == [CREATE_CLASSES, CREATE_CLUSTER_ROLES]
    assert set(check.missing[CREATE_CLASSES]) == set(CLASS_CREATORS)
    every = [right.review_attributes() for right in [*needed_rights(), *ESCALATION_RIGHTS]]
    assert sorted(map(str, answering.asked)) == sorted(map(str, every))


def test_an_identity_in_the_privileged_group_holds_every_right_unasked(answering: Any) -> None:
    answering.groups.append("system:masters")
    answering.denied.update({CREATE_CLASSES, CREATE_CLUSTER_ROLES})  # what RBAC would deny: the group skips RBAC
    check = check_rights(answering.path)
    assert check.missing == {} and answering.asked == [], (check, answering.asked)


def test_granted_rights_are_not_missing_where_the_identity_may_escalate_and_bind(answering: Any) -> None:
    answering.denied.update(escalatable_rights())
    assert check_rights(answering.path).missing == {}


def test_granted_rights_are_missing_for_the_rbac_suite_without_escalate(answering: Any) -> None:
    answering.denied.update({*escalatable_rights(), ESCALATION_RIGHTS[0]})
    missing = check_rights(answering.path).missing
    assert set(missing) == set(escalatable_rights())
    assert {suites for suites in missing.values()} == {("rbac",)}


# --- skipping the suites that need what is missing (--allow-partial) -----------------------------------------------


def test_missing_rights_map_to_the_suites_that_need_them() -> None:
    needed = needed_rights()
    reasons = skip_reasons({CREATE_CLASSES: needed[CREATE_CLASSES], CREATE_CLUSTER_ROLES: needed[CREATE_CLUSTER_ROLES]})
    assert sorted(reasons) == sorted(CLASS_CREATORS)
    assert reasons["protocol"] == "not applicable: the suite's identity cannot create deviceclasses.resource.k8s.io"
    assert reasons["rbac"] == (
        "not applicable: the suite's identity cannot create deviceclasses.resource.k8s.io, "
        "create clusterroles.rbac.authorization.k8s.io"
    )


def test_a_missing_common_right_skips_every_suite() -> None:
    assert sorted(skip_reasons({CREATE_NAMESPACES: needed_rights()[CREATE_NAMESPACES]})) == sorted(SUITE_RIGHTS)


def test_missing_rights_survive_the_trip_to_xdist_workers() -> None:
    missing = {right: suites for right, suites in list(needed_rights().items())[:5]}
    assert missing_from_json(yaml.safe_load(yaml.safe_dump(missing_to_json(missing)))) == missing


@pytest.mark.parametrize(
    ("path", "suite"),
    [
        (paths.CHECKOUT / "suites" / "protocol" / "test_protocol.py", "protocol"),
        (Path("/venv/lib/python3.11/site-packages/dra_conformance/suites/taints/test_device_taints.py"), "taints"),
        (Path("/home/ci/suites/work/suites/rbac/test_matrix.py"), "rbac"),
        (paths.CHECKOUT / "tests" / "unit" / "test_rights.py", None),
        (Path("/srv/suites/mine/test_x.py"), None),
    ],
)
def test_a_check_belongs_to_the_suite_directory_it_is_in(path: Path, suite: str | None) -> None:
    assert suite_of(path) == suite


def test_every_bundled_suite_declares_its_rights() -> None:
    bundled = {p.name for p in paths.suites_dir().iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert bundled == set(SUITE_RIGHTS)


CONFTEST = """
import pytest
from dra_conformance.kube.rights import Right
from dra_conformance.plugin import stash

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    # What the controller's preflight notes under --dra-allow-partial; workers must learn it from the controller.
    if not hasattr(config, "workerinput"):
        right = Right("create", "deviceclasses", "resource.k8s.io", namespaced=False)
        config.stash[stash.MISSING_RIGHTS] = {right: ("protocol", "taints")}
"""


@pytest.mark.parametrize("workers", [["-n", "2"], ["-p", "no:xdist"]], ids=["xdist", "one-process"])
def test_checks_of_suites_that_need_a_missing_right_are_skipped_as_not_applicable(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    check = "def test_{}():\n    pass\n"
    for suite in ("protocol", "taints", "metrics"):
        (pytester.path / "suites" / suite).mkdir(parents=True)
        (pytester.path / "suites" / suite / f"test_{suite}.py").write_text(check.format(suite))
    (pytester.path / "test_engine.py").write_text(check.format("engine"))
    # The preflight that finds rights missing runs only in a run that asks for DRA conformance.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dra-conformance", "-rs", *workers)
    result.assert_outcomes(passed=2, skipped=2)
    skipped = [line for line in result.outlines if line.startswith("SKIPPED")]
    reason = "not applicable: the suite's identity cannot create deviceclasses.resource.k8s.io"
    assert len(skipped) == 2 and all(reason in line for line in skipped), skipped
    assert {line.split("suites/")[1].split("/")[0] for line in skipped} == {"protocol", "taints"}, skipped


@pytest.mark.parametrize(("flag", "passed"), [(["--allow-partial"], True), ([], False)])
def test_run_allow_partial_maps_onto_the_plugin_option(
    flag: list[str], passed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[list[str]] = []

    def pytest_run(args: list[str], html: bool, command: str = "run") -> int:
        runs.append(args)
        return 0

    monkeypatch.setattr(cli, "_pytest_then_html", pytest_run)
    assert cli.main(["run", *flag, "-k", "nothing"]) == 0
    assert ("--dra-allow-partial" in runs[0]) is passed, runs

"""The shipped obligations registry holds together.

It validates, every id the code (or a catalog scenario, as the obligation its outcome states) uses is in it and
every entry is used, every field a driver produces is checked or says why not, and docs/obligations.md is what it
generates.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.model.obligations import OBLIGATION_ID, Basis, Registry, RegistryError
from dra_conformance.report.obligations_doc import render, uncovered_without_reason
from dra_conformance.scenarios import catalog

ROOT = Path(__file__).resolve().parents[2]
# Where checks name obligations: the suites and the engine code they call.
CODE = [ROOT / "suites", ROOT / "dra_conformance"]
DOC = ROOT / "docs" / "obligations.md"
# Strings shaped like ids that are file names ("rbac.yaml", "kubelet.kubeconfig"), not obligations.
FILE_SUFFIXES = {"yaml", "yml", "json", "kubeconfig", "py", "md", "txt", "sock", "log", "jsonl"}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load()


def _ids_in_code(suites: set[str]) -> dict[str, str]:
    """Every string literal shaped like an obligation id of a known suite, with where it is."""
    found = {}
    for root in CODE:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and OBLIGATION_ID.match(node.value)
                    and node.value.split(".", 1)[0] in suites
                    and node.value.split(".", 1)[1] not in FILE_SUFFIXES
                ):
                    found[node.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    # A catalog scenario names the obligation its outcome states; the allocation suite checks it.
    for scenario in catalog.load(paths.scenario_catalog()):
        if scenario.obligation is not None:
            found[scenario.obligation] = f"{scenario.source.relative_to(ROOT)}: {scenario.id}"
    return found


def test_every_obligation_the_code_names_is_registered_and_every_registered_one_is_checked(
    registry: Registry,
) -> None:
    used = _ids_in_code({o.suite for o in registry})
    unknown = {i: where for i, where in used.items() if i not in registry.obligations}
    assert not unknown, f"obligation ids used in code but not in the registry: {unknown}"
    unused = sorted(set(registry.obligations) - set(used))
    assert not unused, f"registered obligations no check uses: {unused}"


def test_every_basis_is_represented_and_every_contract_obligation_cites_upstream_text(registry: Registry) -> None:
    assert {o.basis for o in registry} == set(Basis), {o.basis for o in registry}
    assert all(o.sources for o in registry if o.basis == Basis.CONTRACT)


def test_every_field_a_driver_produces_is_checked_or_says_why_not(registry: Registry) -> None:
    assert registry.fields, "fields.yaml lists the fields a driver produces"
    assert uncovered_without_reason(registry) == []


def test_docs_obligations_md_is_generated_from_the_registry(registry: Registry) -> None:
    assert DOC.read_text() == render(registry), "regenerate: dra-conformance obligations --output docs/obligations.md"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("- {id: demo.x, statement: s, basis: contract}", "cites upstream source text"),
        ("- {id: demo.x, statement: s, basis: defensive}", "says why it is one"),
        ("- {id: demo.x, statement: s, basis: should, why: w}", "basis is one of"),
        ("- {id: other.x, statement: s, basis: harness, why: w}", "an id is 'demo.<words-with-dashes>'"),
        ("- {id: demo.x, statement: s, basis: harness, why: w, severity: high}", "unknown keys"),
        ("- {id: demo.x, statement: s, basis: harness, why: w, fields: [nope]}", "fields not in fields.yaml"),
    ],
)
def test_a_registry_entry_that_does_not_validate_is_named(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "demo.yaml").write_text(entry + "\n")
    (tmp_path / "fields.yaml").write_text("area: [spec.driver]\n")
    with pytest.raises(RegistryError, match=message):
        Registry.load(tmp_path)

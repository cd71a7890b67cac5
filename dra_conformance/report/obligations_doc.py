"""`docs/obligations.md`: the obligations registry for people, with the field-by-field contract coverage table."""

from __future__ import annotations

from collections import Counter

from dra_conformance.model.obligations import Basis, Registry

HEADER = (
    "<!-- Generated from dra_conformance/model/registry/*.yaml by `dra-conformance obligations`; do not edit. -->\n"
)


def basis_table(registry: Registry) -> list[str]:
    """Obligations per suite and basis."""
    counts = Counter((o.suite, o.basis) for o in registry)
    suites = sorted({o.suite for o in registry})
    bases = list(Basis)
    lines = ["| suite | " + " | ".join(str(b) for b in bases) + " | all |", "|---" * (len(bases) + 2) + "|"]
    for suite in suites:
        row = [counts[(suite, b)] for b in bases]
        lines.append(f"| {suite} | " + " | ".join(str(n) for n in row) + f" | {sum(row)} |")
    totals = [sum(counts[(s, b)] for s in suites) for b in bases]
    lines.append("| **all** | " + " | ".join(str(n) for n in totals) + f" | {sum(totals)} |")
    return lines


def coverage_table(registry: Registry) -> list[str]:
    """Every field a driver produces, with the obligations that check it or why none does."""
    lines = ["| area | field | checked by |", "|---|---|---|"]
    for entry in registry.fields.values():
        checking = registry.checking(entry.name)
        if checking:
            cell = ", ".join(f"`{o.id}` ({o.basis})" for o in checking)
        else:
            cell = f"none: {entry.uncovered or 'NO REASON GIVEN'}"
        lines.append(f"| {entry.area} | `{entry.name}` | {cell} |")
    return lines


def uncovered_without_reason(registry: Registry) -> list[str]:
    """Fields no obligation checks and no reason explains: gaps the coverage table must not hide."""
    return [e.name for e in registry.fields.values() if not registry.checking(e.name) and not e.uncovered]


def render(registry: Registry) -> str:
    """The whole document."""
    lines = [
        HEADER,
        "# Obligations",
        "",
        "Every statement a bundled check makes about a driver, a cluster or the metrics API, with its basis:",
        "",
        "- **contract**: the API, its comments or the kubelet's documented behaviour require it; a violation fails;",
        "- **defensive**: what users want beyond the contract; an advisory, a failure only with "
        "`--dra-strictness strict`;",
        "- **harness**: a precondition of the suite; when it does not hold the check errors, never as the driver's"
        " failure.",
        "",
        "Citations name the upstream module, version, path and line, and quote the text;"
        " `tests/unit/test_citations.py` finds each quote at or near its line in the pinned module source.",
        "",
        "## Per suite and basis",
        "",
        *basis_table(registry),
        "",
        "## Contract coverage, field by field",
        "",
        *coverage_table(registry),
        "",
        "## The obligations",
    ]
    for suite in sorted({o.suite for o in registry}):
        lines += ["", f"### {suite}", "", "| id | basis | capability | statement | why |", "|---|---|---|---|---|"]
        for o in (o for o in registry if o.suite == suite):
            why = o.rationale().replace("|", "\\|")
            lines.append(f"| `{o.id}` | {o.basis} | {o.capability or ''} | {o.statement} | {why} |")
    return "\n".join(lines) + "\n"

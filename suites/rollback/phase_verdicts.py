"""A rehearsal's recorded problems judged kind by kind, each as the obligation it breaks.

The rehearsals (`dra_conformance.rollback`: the driver's and the metrics API's) record a phase's problems as text,
for the state file and the rollback report. Each test names, for every kind of problem its phase can record, the
obligation of `dra_conformance/model/registry/rollback.yaml` that kind breaks; the phase's verdict then checks each
of them (held where no problem of that kind was recorded). A problem of no known kind is the suite's own gap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from dra_conformance.model.findings import Obligations
from dra_conformance.model.obligations import Basis

# (obligation id, pattern of the problems that break it), first match wins.
Kinds = Sequence[tuple[str, re.Pattern[str]]]


def kind(obligation: str, pattern: str) -> tuple[str, re.Pattern[str]]:
    """One kind of problem: the text the engine records (matched from its start) and the obligation it breaks."""
    return obligation, re.compile(pattern)


def by_kind(problems: Iterable[str], kinds: Kinds) -> tuple[dict[str, list[str]], list[str]]:
    """The problems of each obligation of `kinds` (every one of them a key), and those of no known kind."""
    found: dict[str, list[str]] = {obligation: [] for obligation, _ in kinds}
    unknown: list[str] = []
    for problem in problems:
        obligation = next((o for o, pattern in kinds if pattern.match(problem)), None)
        (found[obligation] if obligation is not None else unknown).append(problem)
    return found, unknown


def judge(obligations: Obligations, found: dict[str, list[str]], unknown: list[str], where: str) -> None:
    """Check every obligation in `found`: held where its list is empty, broken with those problems otherwise.

    Our own preconditions go first (their error says the rest may be artifacts). Then, without strict, the defensive
    ones before the contract ones, so their advisories are recorded before a contract failure ends the check; under
    strict the contract ones first, so the failure names the contract.
    """
    obligations.check("rollback.problem-kind-known", not unknown, unknown, where)
    later = (Basis.CONTRACT, Basis.DEFENSIVE) if obligations.strict else (Basis.DEFENSIVE, Basis.CONTRACT)
    order = (Basis.HARNESS, *later)
    for obligation in sorted(found, key=lambda o: order.index(obligations.registry[o].basis)):
        obligations.check(obligation, not found[obligation], found[obligation], where)

"""The checker a test uses to verify obligations of the registry; its findings go to the run's records.

`obligations.check("status.entry-names-its-driver", holds, observed)` looks the obligation up by id and acts on its
basis (`dra_conformance.model.obligations`): a contract violation fails the check, a defensive one is an advisory
(a failure under `strict`), a harness one errors the check as the suite's own problem. Every verdict is recorded,
so the run can say which obligations it exercised and which decided it (`dra_conformance.report.advisories`
summarizes the advisories).

What was observed is masked before it becomes text (`dra_conformance.model.masking`): the failure message, and so
the terminal, JUnit and Allure, and the advisory record quote the masked state; `--dra-no-mask` keeps it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from dra_conformance.model.masking import ObservedMask
from dra_conformance.model.obligations import (
    Basis,
    HarnessPreconditionFailed,
    ObligationFailed,
    Registry,
    violation_message,
)
from dra_conformance.model.records import RunRecords

# One line per defensive finding: the run report's advisories.
RECORD_KIND = "advisories"
# One line per obligation verdict (id, check, held): what the run exercised.
EXERCISED_KIND = "obligations"


@dataclass
class Obligations:
    """The obligations one check verifies; advisories and verdicts go to the run's records."""

    nodeid: str
    strict: bool
    records: RunRecords
    registry: Registry
    # Every obligation this check verified, in the order first checked (the report labels the check with them).
    exercised: list[str] = field(default_factory=list)
    # What observed state passes through before it becomes text: masked unless the run keeps it (--dra-no-mask).
    mask: ObservedMask = field(default_factory=ObservedMask)

    def check(self, obligation_id: str, holds: bool, observed: Any, where: str = "") -> bool:
        """Act on `obligation_id` by its basis unless it holds; returns whether it held (defensive ones go on)."""
        __tracebackhide__ = True
        obligation = self.registry[obligation_id]
        if obligation.id not in self.exercised:
            self.exercised.append(obligation.id)
        self.records.add(EXERCISED_KIND, {"id": obligation.id, "check": self.nodeid, "held": bool(holds)})
        if holds:
            return True
        observed = self.mask(observed)
        message = violation_message(obligation, observed, where)
        if obligation.basis == Basis.HARNESS:
            raise HarnessPreconditionFailed(obligation, message)
        if obligation.basis == Basis.DEFENSIVE:
            self.records.add(
                RECORD_KIND,
                {
                    "check": self.nodeid,
                    "id": obligation.id,
                    "obligation": f"{where}: {obligation.statement}" if where else obligation.statement,
                    "source": obligation.rationale(),
                    "observed": str(observed),
                },
            )
            if not self.strict:
                return False
        raise ObligationFailed(obligation, message)

    def fail(self, obligation_id: str, observed: Any, where: str = "") -> NoReturn:
        """`obligation_id` (a contract or harness one) does not hold: fail or error the check."""
        __tracebackhide__ = True
        if self.registry[obligation_id].basis == Basis.DEFENSIVE:
            raise TypeError(f"{obligation_id} is defensive: use check(), which goes on unless strict")
        self.check(obligation_id, False, observed, where)
        raise AssertionError("unreachable: check() raised for a broken contract or harness obligation")

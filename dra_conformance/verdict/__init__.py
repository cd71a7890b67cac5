"""The verdict engine: typed findings in, one verdict out, by rules written as data (`rules.RULES`).

Pure: it imports nothing but the standard library (no pytest, no cluster), so its rules are unit-tested alone and
anything that decides a verdict calls the same engine: the pytest plugin (which only collects the findings and
hands them over), the merge of a split in-cluster run (`sonobuoy/merge.py`), and `dra-conformance verdict RUN`,
which decides again from the findings a run recorded (`findings.json`).
"""

from dra_conformance.verdict.findings import (
    CLUSTER_FAULT,
    DRIVER_ANSWERS,
    DRIVER_STAYS_UP,
    FINDINGS_JSON,
    HARNESS_ERROR,
    IDENTITY_LACKS,
    METRICS_CHECKS,
    WORKER_CRASH,
    CheckResult,
    Findings,
    FindingsError,
    Outcome,
    RunFacts,
    Selection,
    Verdict,
    about_metrics,
    capability_states,
    capability_table,
    every_failure_named,
    split_contracts,
)
from dra_conformance.verdict.replay import Replay, replay
from dra_conformance.verdict.rules import RULES, Rule, decide, judge

__all__ = [
    "CLUSTER_FAULT",
    "DRIVER_ANSWERS",
    "DRIVER_STAYS_UP",
    "FINDINGS_JSON",
    "HARNESS_ERROR",
    "IDENTITY_LACKS",
    "METRICS_CHECKS",
    "RULES",
    "WORKER_CRASH",
    "CheckResult",
    "Findings",
    "FindingsError",
    "Outcome",
    "Replay",
    "Rule",
    "RunFacts",
    "Selection",
    "Verdict",
    "about_metrics",
    "capability_states",
    "capability_table",
    "decide",
    "every_failure_named",
    "judge",
    "replay",
    "split_contracts",
]

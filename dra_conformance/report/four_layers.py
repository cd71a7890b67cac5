"""The four-layer cross-check in the summary: how many cases ran and passed, and which layer broke in each.

The kubelet suite's check (suites/kubelet/test_four_layers.py) records one `FourLayerRecord` per case it ran
(`kubelet.layers.RECORD_KIND`); the summary joins each record with its check's outcome.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from dra_conformance.kubelet.layers import RECORD_KIND, Layer
from dra_conformance.model.records import read_records

NOT_RUN = "not run"
# The case of a parametrized check: `...::test_x[allocated-but-prepare-failed]`, with xdist's group after it where
# the check runs in one (`...]@real-node`).
_CASE = re.compile(r"\[(?P<case>[^\]]+)\](@[\w.-]+)?$")


def four_layer_section(run_dir: Path, outcomes: dict[str, str]) -> dict[str, Any]:
    """The summary's section: every case with its check's outcome and the layer its record says broke."""
    cases = []
    for entry in read_records(run_dir, RECORD_KIND):
        record = json.loads(entry["record"])
        check = str(entry["check"])
        found = _CASE.search(check)
        answers = {layer: str(answer["answer"]) for layer, answer in record.get("answers", {}).items()}
        cases.append(
            {
                "case": found.group("case") if found else check,
                "check": check,
                "outcome": outcomes.get(check, "not reported"),
                "broken_layer": str(record.get("broken_layer", "none")),
                "answers": answers,
            }
        )
    if not cases:
        return {"state": NOT_RUN}
    passed = sum(case["outcome"] == "passed" for case in cases)
    return {"state": "ran", "ran": len(cases), "passed": passed, "cases": cases}


def four_layer_line(section: dict[str, Any] | None) -> str | None:
    """One line: ran, passed, and the layer that broke in each case; None where it did not run."""
    if not section or section.get("state") != "ran":
        return None
    cases = "; ".join(
        f"{case['case']}: {_broke(case['broken_layer'])} ({case['outcome']})" for case in section["cases"]
    )
    return f"four-layer cross-check: {section['ran']} ran, {section['passed']} passed; {cases}"


def four_layer_markdown(section: dict[str, Any] | None) -> list[str]:
    """The section of summary.md: one row per case, one column per layer."""
    if not section or section.get("state") != "ran":
        return []
    layers = [str(layer) for layer in Layer]
    lines = [
        f"## Four-layer cross-check: {section['ran']} ran, {section['passed']} passed",
        "",
        "| case | check | broke | " + " | ".join(layers) + " |",
        "|---|---|---|" + "---|" * len(layers),
    ]
    for case in section["cases"]:
        answers = " | ".join(case["answers"].get(layer, "-") for layer in layers)
        lines.append(f"| {case['case']} | {case['outcome']} | {_broke(case['broken_layer'])} | {answers} |")
    return [*lines, ""]


def _broke(layer: str) -> str:
    return "no layer broke" if layer == "none" else f"{layer} broke"

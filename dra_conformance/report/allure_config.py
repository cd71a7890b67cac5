"""The Allure 3 configuration of a run's report: the verdict and the canary gate's rules as quality gates.

The report is rendered by `allure_npm/render.mjs`, which has Allure validate these quality gates over the run's
results (`allure generate` validates none). Each rule is a custom quality-gate rule whose outcome is already decided
(by the certification summary and the canary gate): the report shows each with its figure and threshold, first
thing on its overview.
"""

from __future__ import annotations

import json
from typing import Any

CERTIFYING = ("certified", "certified with advisories")
# Capability, then suite, then file: the labels `plugin.certification_hooks` gives every bundled check.
GROUP_BY = ("parentSuite", "suite", "subSuite")


def gate_rules(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The quality gate's rules: the certification verdict, then each canary gate rule, each with its outcome."""
    verdict = str(summary.get("verdict", "not evaluated"))
    rules = [
        {
            "rule": "certification verdict",
            "success": verdict in CERTIFYING,
            "message": f"{verdict}: " + "; ".join(summary.get("reasons") or []),
        }
    ]
    for rule in (summary.get("canary_gate") or {}).get("rules", []):
        why = f" ({rule['why']})" if rule.get("why") else ""
        rules.append(
            {
                "rule": f"canary gate: {rule['rule']}",
                "success": rule.get("result") == "pass",
                "message": f"{rule.get('result')}: {rule.get('figure')}; threshold {rule.get('threshold')}{why}",
            }
        )
    return rules


def allurerc(name: str, output: str, summary: dict[str, Any] | None) -> str:
    """allurerc.mjs for the run's report: its name, output, and the quality gate where the run has a summary."""
    rules = gate_rules(summary) if summary else []
    return f"""// Written by dra-conformance for this run's report; the outcomes are decided, Allure only shows them.
const decided = {json.dumps(rules, indent=2)};
const use = decided.map((r) => ({{
  rule: r.rule,
  message: () => r.message,
  successMessage: () => r.message,
  validate: async () => ({{ success: r.success, actual: r.message, testResults: [] }}),
}}));
export default {{
  name: {json.dumps(name)},
  output: {json.dumps(output)},
  // The tree groups checks by what they certify (labels set by the plugin), not by file path.
  plugins: {{ awesome: {{ options: {{ reportName: {json.dumps(name)}, groupBy: {json.dumps(list(GROUP_BY))} }} }} }},
  ...(use.length ? {{ qualityGate: {{ rules: [Object.fromEntries(use.map((u) => [u.rule, true]))], use }} }} : {{}}),
}};
"""

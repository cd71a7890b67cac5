"""The canary gate's document (`canary.rules.evaluate`) as text: its section of summary.md, its printed form."""

from __future__ import annotations

from typing import Any

from dra_conformance.canary.rules import RuleResult


def caveats(rules: list[dict[str, Any]]) -> list[str]:
    """Each distinct reason the rules give (`why`), in order of first appearance: printed once, cited by number."""
    notes: list[str] = []
    for rule in rules:
        if rule.get("why") and rule["why"] not in notes:
            notes.append(rule["why"])
    return notes


def cited_rule(rule: dict[str, Any], notes: list[str]) -> tuple[str, str, str]:
    """A rule's figure, threshold and result, each caveat of `notes` in them replaced by its number: [1]."""
    figure, threshold = _cite(str(rule["figure"]), notes), _cite(str(rule["threshold"]), notes)
    result = str(rule["result"])
    why = rule.get("why")
    if why and why in notes:
        mark = f"[{notes.index(why) + 1}]"
        result += "" if mark in figure or mark in threshold else f" {mark}"
    return figure, threshold, result


def _cite(text: str, notes: list[str]) -> str:
    # The longest first: a caveat may hold a shorter one.
    for note in sorted(notes, key=len, reverse=True):
        text = text.replace(note, f"[{notes.index(note) + 1}]")
    return text


def markdown_lines(gate: dict[str, Any]) -> list[str]:
    """The gate's section of summary.md: one table, then each caveat once."""
    lines = [f"## Canary gate: {gate['state']}", "", *(f"- {reason}" for reason in gate.get("reasons", [])), ""]
    if "rules" not in gate:
        return [*lines, f"{gate.get('why', '')}"]
    notes = caveats(gate["rules"])
    lines += ["| rule | figure | threshold | result |", "|---|---|---|---|"]
    for rule in gate["rules"]:
        figure, threshold, result = cited_rule(rule, notes)
        lines.append(f"| {rule['rule']} | {figure} | {threshold} | {result} |")
    if notes:
        lines += ["", *(f"[{number}] {note}  " for number, note in enumerate(notes, start=1))]
    excluded = gate.get("excluded") or []
    if excluded:
        lines += ["", "Excluded from the error budget, provoked on purpose by the checks named:", ""]
        lines += [f"- {attempt}" for attempt in excluded]
    return lines


def terminal_lines(gate: dict[str, Any]) -> list[str]:
    """The gate in the printed short form: its verdict, one line per rule, then each caveat once."""
    lines = [f"  canary gate: {gate['state']}"]
    notes = caveats(gate.get("rules", []))
    for rule in gate.get("rules", []):
        figure, threshold, result = cited_rule(rule, notes)
        if rule["result"] == RuleResult.NO_DATA:
            # "no data", or a figure beside the missing one (the suite's own prepare latency), and its caveat.
            mark = result.removeprefix(RuleResult.NO_DATA)
            lines.append(f"    {rule['rule']}: {figure}{mark}; threshold {threshold}")
        else:
            lines.append(f"    {rule['rule']}: {result}: {figure}; threshold {threshold}")
    lines += [f"    [{number}] {note}" for number, note in enumerate(notes, start=1)]
    return lines

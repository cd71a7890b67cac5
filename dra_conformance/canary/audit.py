"""The canary gate's facts from the cluster's audit log: allocation times and the driver's status writes.

What counts and what does not (the driver under test's own identity, protocol answers, provoked refusals) is rule 2
of `canary.rules`; canary pods are the device-plugin rollback rehearsal's (`rollback.extended_resource`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from dra_conformance.canary.inputs import AuditFacts, Provoked
from dra_conformance.kube import audit_log
from dra_conformance.rollback.extended_resource import DEVICE_PLUGIN, DRA, baseline_prefix

# The rehearsal's canary pods, by the names it gives them (`<baseline prefix of the path>-<n>`), to their path.
CANARY_PATHS = {baseline_prefix(path): path for path in (DEVICE_PLUGIN, DRA)}
SCHEDULER = "system:kube-scheduler"
# Status write answers that are the protocol, not errors: gone, conflict, throttled.
PROTOCOL_CODES = frozenset({404, 409, 429})
FORBIDDEN = 403
WRITE_VERBS = frozenset({"update", "patch"})


def _when(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["stageTimestamp"]))


def _code(event: dict[str, Any]) -> int:
    return int((event.get("responseStatus") or {}).get("code", 0))


def audit_facts(
    events: Iterable[dict[str, Any]],
    *,
    driver_user: str,
    canary_namespace: str | None,
    since: datetime,
    until: datetime,
    provoked: Iterable[Provoked] = (),
) -> AuditFacts:
    """Allocation times, and the driver's status writes within [since, until], from audit events (any order).

    Canary pods are found by namespace and name whatever their time (the rehearsal may have measured in an earlier
    run of the same cluster); everything else only within the run's window.
    """
    created: dict[tuple[str, str], list[datetime]] = defaultdict(list)
    bound: list[tuple[str, str, datetime]] = []
    allocations: dict[str, list[datetime]] = defaultdict(list)
    facts = AuditFacts()
    provocations = list(provoked)
    for event in sorted(events, key=_when):
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        resource, sub, verb = ref.get("resource"), ref.get("subresource"), event.get("verb")
        namespace, name, code, when = ref.get("namespace", ""), ref.get("name", ""), _code(event), _when(event)
        user = (event.get("user") or {}).get("username")
        in_run = since <= when <= until
        if resource == "pods" and verb == "create" and code == 201 and name:
            if sub == "binding":
                bound.append((namespace, name, when))
            elif sub is None:
                created[(namespace, name)].append(when)
        elif resource == "resourceclaims" and sub == "status" and verb in WRITE_VERBS:
            if user == SCHEDULER and code == 200:
                allocations[namespace].append(when)
            elif user == driver_user and in_run:
                facts.status_writes += 1
                attempt = f"{namespace}/{name} {verb} -> {code}"
                cause = next((p for p in provocations if p.covers(namespace, when)), None)
                if cause is not None and (code == FORBIDDEN or (code >= 400 and code not in PROTOCOL_CODES)):
                    facts.excluded.append(f"{attempt} (provoked by {cause.check}: {cause.what})")
                elif code == FORBIDDEN:
                    facts.denials.append(attempt)
                elif code >= 400 and code not in PROTOCOL_CODES:
                    facts.errors.append(attempt)
    for namespace, name, at in bound:
        earlier = [t for t in created.get((namespace, name), []) if t <= at]
        if not earlier:
            continue
        start = max(earlier)
        seconds = round((at - start).total_seconds(), 3)
        prefix, _, index = name.rpartition("-")
        path = CANARY_PATHS.get(prefix) if namespace == canary_namespace and index.isdigit() else None
        if path is not None:
            facts.canary_allocation.setdefault(path, []).append(seconds)
            facts.canary_bound[path] = facts.canary_bound.get(path, 0) + 1
        elif since <= start <= until and any(start <= t <= at for t in allocations.get(namespace, [])):
            facts.run_dra_allocation.append(seconds)
    return facts


def _gate_relevant(line: str) -> bool:
    """Pod events and claim status writes: all the gate reads from the audit log."""
    return '"resource":"pods"' in line or ('"subresource":"status"' in line and "resourceclaims" in line)


def gather_audit(
    path: Path | None,
    *,
    driver_user: str,
    canary_namespace: str | None,
    since: datetime,
    until: datetime,
    provoked: Iterable[Provoked] = (),
) -> tuple[AuditFacts | None, str]:
    """The audit facts, or None and why they are missing."""
    if path is None:
        return None, "the cluster's audit log is not readable here (an existing cluster: pass --dra-audit-log PATH)"
    if not path.is_file():
        return None, f"audit log {path} does not exist"
    facts = audit_facts(
        audit_log.matching(path, _gate_relevant),
        driver_user=driver_user,
        canary_namespace=canary_namespace,
        since=since,
        until=until,
        provoked=provoked,
    )
    return facts, ""

"""Device taints as a rollout uses them: DeviceTaintRules, claim tolerations, the rule's condition, and the order.

A taint turns a health signal into an action: None only informs, NoSchedule keeps new allocations away, NoExecute
evicts pods whose claims do not tolerate it. A false positive at NoExecute is an outage, so a rollout goes
None -> NoSchedule -> NoExecute, each step only after evidence from the one before.

The eviction controller (kube-controller-manager, device-taint-eviction) writes one condition on every rule it has
processed, `EvictionInProgress`, with `observedGeneration` set to the generation it saw. Its message is for people
(for effect None: what NoExecute would evict); checks read the condition, never numbers in the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dra_conformance.kube.builders import RESOURCE_API, Manifest

EVICTION_CONDITION = "EvictionInProgress"
# The pod condition the eviction controller sets before it deletes a pod.
EVICTED_REASON = "DeletionByDeviceTaintManager"


class Effect(StrEnum):
    """A device taint's effect, in rollout order."""

    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


ROLLOUT_ORDER = (Effect.NONE, Effect.NO_SCHEDULE, Effect.NO_EXECUTE)


@dataclass(frozen=True)
class DeviceSelection:
    """Which devices a rule taints: one driver's pool, or one device of it."""

    driver: str
    pool: str
    device: str | None = None

    def selector(self) -> Manifest:
        """The rule's spec.deviceSelector."""
        return {"driver": self.driver, "pool": self.pool, **({"device": self.device} if self.device else {})}


def taint_rule(name: str, selection: DeviceSelection, key: str, effect: Effect) -> Manifest:
    """A DeviceTaintRule tainting `selection` with `key` and `effect` (timeAdded is set by the API server)."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selection.selector(), "taint": {"key": key, "value": "rollout", "effect": effect}},
    }


def claim_toleration(key: str, effect: Effect, seconds: int | None = None) -> Manifest:
    """A device request's toleration of taint `key` with `effect` (for NoExecute, for `seconds` when given)."""
    toleration: Manifest = {"key": key, "operator": "Exists", "effect": effect}
    if seconds is not None:
        toleration["tolerationSeconds"] = seconds
    return toleration


def observed_condition(rule: Manifest) -> Manifest | None:
    """The rule's EvictionInProgress condition once it reflects the rule's current generation, else None."""
    generation = rule.get("metadata", {}).get("generation")
    for condition in (rule.get("status") or {}).get("conditions") or []:
        if condition.get("type") == EVICTION_CONDITION and condition.get("observedGeneration") == generation:
            return dict(condition)
    return None


def allocated_devices(claim: Manifest) -> list[DeviceSelection]:
    """The devices allocated to a claim (`claim` as the API returns it)."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [DeviceSelection(r["driver"], r["pool"], r["device"]) for r in results]


@dataclass(frozen=True)
class RolloutStep:
    """One effect a rule had, from when, and the evidence that allowed it."""

    effect: Effect
    at: float
    evidence: str


@dataclass
class RolloutLog:
    """The effects one rule went through, in order; `skipped_steps` names what a rollout jumped over."""

    rule: str
    steps: list[RolloutStep] = field(default_factory=list)

    def record(self, effect: Effect, at: float, evidence: str) -> None:
        """Note that the rule now has `effect`, set at `at` (monotonic seconds) on `evidence`."""
        self.steps.append(RolloutStep(effect, at, evidence))

    def skipped_steps(self) -> list[str]:
        """Each effect reached without the one before it, e.g. "NoExecute without NoSchedule before it"."""
        return rollout_violations([step.effect for step in self.steps])

    def to_json(self) -> dict[str, Any]:
        """The log for reports, with seconds since the first step."""
        start = self.steps[0].at if self.steps else 0.0
        return {
            "rule": self.rule,
            "steps": [
                {"effect": str(s.effect), "after_seconds": round(s.at - start, 3), "evidence": s.evidence}
                for s in self.steps
            ],
            "skipped": self.skipped_steps(),
        }


def rollout_violations(effects: Sequence[Effect]) -> list[str]:
    """Steps of a rule's effect history that skip ahead of ROLLOUT_ORDER (going back is always allowed)."""
    problems = []
    reached = -1
    for effect in effects:
        rank = ROLLOUT_ORDER.index(effect)
        if rank > reached + 1:
            missing = ", ".join(str(e) for e in ROLLOUT_ORDER[reached + 1 : rank])
            problems.append(f"{effect} without {missing} before it")
        reached = rank
    return problems

"""One exploration: Hypothesis's settings from a budget and a seed, the run, its shrunk finding, the explored space.

The seed makes the run reproducible: the same seed draws the same operations in the same order, so a finding comes
back with `--replay SEED` as long as the driver and the scheduler answer as before. The time budget only decides
when new examples stop being drawn (an example past it is dropped as invalid, never judged), so a replay without it
reaches the same examples; shrinking gets a time of its own after the first finding, and the shrunk example is
always replayed once more, which is the sequence reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from dra_conformance.explore.invariants import Violation
from dra_conformance.explore.machine import BrokenObligation, Failure, RunState, StopExploring, machine_for
from dra_conformance.explore.world import World

# The default budget of `dra-conformance explore`: a few minutes of exploring, examples of up to 20 steps.
DEFAULT_SECONDS = 180.0
DEFAULT_MAX_EXAMPLES = 100
DEFAULT_MAX_STEPS = 20
# Shrinking replays a failing sequence many times over, each a few seconds on a cluster: its own time, after the
# first finding, so a finding late in the budget is still shrunk.
DEFAULT_SHRINK_SECONDS = 120.0


# Hypothesis steps per operation the budget allows: early in an example most operations cannot run yet (nothing to
# prepare before a claim exists), and such a draw is skipped.
DRAWS_PER_STEP = 3


@dataclass(frozen=True)
class Budget:
    """How much one exploration may do."""

    max_examples: int = DEFAULT_MAX_EXAMPLES
    max_steps: int = DEFAULT_MAX_STEPS
    # Seconds of drawing new examples; None: no time limit (a replay), only max_examples.
    seconds: float | None = DEFAULT_SECONDS
    shrink_seconds: float = DEFAULT_SHRINK_SECONDS

    def describe(self) -> str:
        """'180 s, 100 examples of up to 20 steps'."""
        time_limit = "no time limit" if self.seconds is None else f"{self.seconds:g} s"
        return f"{time_limit}, {self.max_examples} examples of up to {self.max_steps} steps"


@dataclass(frozen=True)
class Finding:
    """The shortest failing sequence found: the broken obligation and the steps, with the example it came from."""

    violation: Violation
    steps: tuple[str, ...]
    # Hypothesis finished shrinking and its last replay of the shrunk sequence failed again.
    shrunk: bool
    # Hypothesis's last replay of the shrunk sequence did not fail: the driver (or the cluster) is not deterministic.
    flaky: bool = False
    # How far the exploration had gone when it first met a failure: examples, operations, seconds.
    found_after: tuple[int, int, float] = (0, 0, 0.0)

    def how(self) -> str:
        """How the sequence was found, for the report."""
        if self.shrunk:
            return "shrunk"
        if self.flaky:
            return "the shortest seen; Hypothesis's replay of its shrunk sequence did not fail again"
        return "the shortest seen; the shrinking budget ended before Hypothesis finished"


@dataclass
class Exploration:
    """What one exploration did and found."""

    seed: int
    budget: Budget
    seconds: float
    examples: int
    steps: int
    operations: dict[str, int]
    shapes: dict[str, int]
    exercised: list[str]
    advisories: list[Violation] = field(default_factory=list)
    # Of the examples and steps, those that ran while shrinking the first finding.
    shrink_examples: int = 0
    shrink_steps: int = 0
    # Invariant checks run (one after each step) and obligations stated (each a verdict on a claim, pool or call).
    invariant_checks: int = 0
    stated: int = 0
    # Operations and claim shapes the driver, its profile or the backend ruled out, with the reason.
    not_explored: dict[str, str] = field(default_factory=dict)
    finding: Finding | None = None
    # Why the suite could not go on exploring (its problem, not the driver's).
    harness: str | None = None
    # The time budget ended the drawing of new examples (or the shrinking) before max_examples.
    budget_spent: bool = False

    def to_json(self) -> dict[str, Any]:
        """The run record of the exploration."""
        return {
            "seed": self.seed,
            "budget": {
                "seconds": self.budget.seconds,
                "max_examples": self.budget.max_examples,
                "max_steps": self.budget.max_steps,
                "shrink_seconds": self.budget.shrink_seconds,
            },
            "seconds": round(self.seconds, 1),
            "examples": self.examples,
            "steps": self.steps,
            "operations": self.operations,
            "shapes": self.shapes,
            "shrink_examples": self.shrink_examples,
            "shrink_steps": self.shrink_steps,
            "invariant_checks": self.invariant_checks,
            "stated": self.stated,
            "not_explored": self.not_explored,
            "exercised": self.exercised,
            "advisories": [vars(v) for v in self.advisories],
            "finding": None
            if self.finding is None
            else {
                "obligation": self.finding.violation.obligation,
                "observed": self.finding.violation.observed,
                "where": self.finding.violation.where,
                "steps": list(self.finding.steps),
                "shrunk": self.finding.shrunk,
                "found_after": {
                    "examples": self.finding.found_after[0],
                    "steps": self.finding.found_after[1],
                    "seconds": round(self.finding.found_after[2], 1),
                },
                "flaky": self.finding.flaky,
            },
            "harness": self.harness,
            "budget_spent": self.budget_spent,
        }


def hypothesis_settings(budget: Budget) -> settings:
    """Settings of a reproducible exploration: no example database, no deadline, no health check (a cluster is slow)."""
    return settings(
        max_examples=budget.max_examples,
        # Hypothesis's steps include draws of an operation that cannot run then (skipped, see ExploreMachine.step);
        # the machine itself stops after max_steps operations.
        stateful_step_count=budget.max_steps * DRAWS_PER_STEP,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        # No explain phase: it replays examples again only to comment on them.
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )


def explore(
    world: World,
    budget: Budget,
    seed_value: int,
    fails: Callable[[str], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Exploration:
    """Explore `world` within `budget` from `seed_value`; `fails` says which broken obligations are findings."""
    started = clock()
    run = RunState(
        fails=fails,
        clock=clock,
        sleep=sleep,
        max_steps=budget.max_steps,
        explore_until=None if budget.seconds is None else started + budget.seconds,
        shrink_seconds=budget.shrink_seconds,
    )
    not_explored = world.not_explored()
    machine = seed(seed_value)(machine_for(world, run))
    flaky = False
    try:
        run_state_machine_as_test(machine, settings=hypothesis_settings(budget))
    except BrokenObligation:
        pass  # Hypothesis shrank the finding and replayed the shrunk sequence, which failed again
    except Flaky:
        # Either our own stop, met where an earlier example went on (Hypothesis takes that for inconsistent data
        # generation), or a shrunk sequence that did not fail when replayed: report the shortest one that did.
        flaky = not run.stop_raised
    except StopExploring:
        pass  # the budget (exploring, or shrinking a finding) or a harness problem ended the run
    return Exploration(
        seed=seed_value,
        budget=budget,
        seconds=clock() - started,
        examples=run.examples,
        steps=run.steps,
        operations=dict(run.operations.most_common()),
        shapes=dict(run.shapes.most_common()),
        exercised=sorted(run.exercised),
        advisories=list(run.advisories.values()),
        shrink_examples=run.shrink_examples,
        shrink_steps=run.shrink_steps,
        invariant_checks=run.invariant_checks,
        stated=run.stated,
        not_explored=not_explored,
        finding=_finding(run.failures, flaky, started),
        harness=run.harness,
        budget_spent=run.budget_spent,
    )


def _finding(failures: list[Failure], flaky: bool, started: float) -> Finding | None:
    """The final replay's failure where there is one, else the shortest failing sequence seen (each one failed)."""
    if not failures:
        return None
    first = failures[0]
    after = (first.example, first.steps_before, first.at - started)
    final = [f for f in failures if f.final]
    if final:
        return Finding(final[-1].violation, final[-1].steps, shrunk=True, found_after=after)
    shortest = min(failures, key=lambda f: len(f.steps))
    return Finding(shortest.violation, shortest.steps, shrunk=False, flaky=flaky, found_after=after)


def _ended(exploration: Exploration) -> str:
    if not exploration.budget_spent:
        return ""
    return "; shrinking ran out of time" if exploration.finding is not None else "; exploring ran out of time"


def render(exploration: Exploration, reproduce: str) -> list[str]:
    """The explored space and the finding, for the terminal and the check's failure message."""
    e = exploration
    lines = [
        f"explored with seed {e.seed}: {e.examples} examples, {e.steps} steps in {e.seconds:.1f} s "
        f"(budget {e.budget.describe()}{_ended(e)})",
        "operations: " + (", ".join(f"{name} {count}" for name, count in e.operations.items()) or "none"),
        "claim shapes (requests' devices; a: admin access, o: the other driver's): "
        + (", ".join(f"{shape} x{count}" for shape, count in e.shapes.items()) or "none"),
        f"obligations checked: {len(e.exercised)} ({e.stated} verdicts in {e.invariant_checks} invariant checks "
        f"after steps)"
        + (f"; shrinking ran {e.shrink_examples} examples, {e.shrink_steps} steps" if e.shrink_examples else ""),
    ]
    lines += [f"not explored: {what}: {why}" for what, why in e.not_explored.items()]
    lines += [f"advisory: {v.describe()}" for v in e.advisories]
    if e.harness:
        lines.append(f"the exploration could not go on: {e.harness}")
    if e.finding is not None:
        found = e.finding
        examples, steps, seconds = found.found_after
        lines.append(f"finding: {found.violation.describe()}")
        lines.append(f"found in example {examples}, after {steps} operations and {seconds:.1f} s")
        lines.append(f"sequence ({found.how()}, {len(found.steps)} steps, seed {e.seed}):")
        lines += [f"  {index}. {step}" for index, step in enumerate(found.steps, start=1)]
        if not found.steps:
            lines.append("  (none: it did not hold as the example began, before any operation)")
    lines.append(f"reproduce: {reproduce}")
    return lines

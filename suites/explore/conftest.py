"""The explorer's budget and seed (`dra-conformance explore` sets them), and the DeviceClass its claims ask for.

The options are the suite tier's: a default run explores within a small budget, from a seed derived from the run's
id, so every run explores other sequences and says which seed it used. They are registered here, where the suite is,
so a run that does not collect it never shows them; `dra-conformance explore` passes them for its own budget.
"""

from __future__ import annotations

import pytest

from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker

# The suite tier in a default run: a minute of exploring and a minute of shrinking at most, examples of up to 12
# operations (each claim is a pod the scheduler binds, each restart a process start with a complete pool).
TIER_SECONDS = 60.0
TIER_SHRINK_SECONDS = 60.0
TIER_MAX_EXAMPLES = 50
TIER_MAX_STEPS = 12


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dra-explore-*: the exploration's seed and budget."""
    group = parser.getgroup("dra-explore", "DRA conformance: the model-based explorer (suites/explore)")
    group.addoption("--dra-explore-seed", type=int, default=None, help="seed (default: derived from the run's id)")
    group.addoption(
        "--dra-explore-seconds",
        type=float,
        default=TIER_SECONDS,
        help=f"seconds of drawing new examples; 0: no time limit (default {TIER_SECONDS:g})",
    )
    group.addoption(
        "--dra-explore-shrink-seconds",
        type=float,
        default=TIER_SHRINK_SECONDS,
        help=f"seconds of shrinking after the first finding (default {TIER_SHRINK_SECONDS:g})",
    )
    group.addoption(
        "--dra-explore-max-examples",
        type=int,
        default=TIER_MAX_EXAMPLES,
        help=f"examples (operation sequences) at most (default {TIER_MAX_EXAMPLES})",
    )
    group.addoption(
        "--dra-explore-max-steps",
        type=int,
        default=TIER_MAX_STEPS,
        help=f"operations per example at most (default {TIER_MAX_STEPS})",
    )


@pytest.fixture
def device_class(tracker: ResourceTracker, build: Builder) -> str:
    """A DeviceClass selecting the driver under test."""
    return str(tracker.create(build.device_class())["metadata"]["name"])

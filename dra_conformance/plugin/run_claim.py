"""The run's claim on its local cluster (`backends.local.run_claims`): taken before it starts, given back at end.

Only where the command line names the cluster (`--dra-cluster=local`, as `dra-conformance run` always does): the
controller claims the state directory before it starts or attaches to the cluster, so a second run is refused in
one line, or waits (`--dra-wait`), and never joins silently unless both share it (`--dra-share-cluster`).
"""

from __future__ import annotations

import sys

import pytest

from dra_conformance.backends.base import ClusterBackend
from dra_conformance.backends.registry import RunClaims, run_claims
from dra_conformance.plugin import stash
from dra_conformance.plugin.options import GROUP

# The claims this process made for the run (absent where the run claims nothing).
CLAIMS = pytest.StashKey[RunClaims]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options of a run whose local cluster another run holds."""
    group = parser.getgroup(GROUP)
    group.addoption(
        "--dra-wait",
        action="store_true",
        help="when another run holds the local cluster's state directory, wait until it ends (saying so) instead of "
        "refusing the run",
    )
    group.addoption(
        "--dra-share-cluster",
        action="store_true",
        help="hold the local cluster together with other runs that pass this too; each promises not to restart, "
        "swap or change what the others use (default: one run per cluster)",
    )


def claim_cluster(config: pytest.Config, backend: ClusterBackend) -> None:
    """Claim `backend`'s state directory for this run if it is a local cluster; a UsageError if another run holds it."""
    claims = run_claims(backend)
    if claims is None:
        return
    claims.claim(
        config.stash[stash.RUN_ID],
        config.stash[stash.OWNER_PID],
        shared=bool(config.getoption("--dra-share-cluster")),
        wait=bool(config.getoption("--dra-wait")),
        echo=lambda line: print(line, file=sys.stderr, flush=True),
    )
    config.stash[CLAIMS] = claims


def release_cluster(config: pytest.Config) -> None:
    """Give back this run's claim, if it made one."""
    claims = config.stash.get(CLAIMS, None)
    if claims is not None:
        claims.release(config.stash[stash.RUN_ID])
        del config.stash[CLAIMS]

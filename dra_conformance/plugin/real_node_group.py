"""A driver on real nodes only: every check that leases its nodes runs in the real-node xdist group.

The kubelet-mode checks share one worker (`xdist_group("real-node")`) because the real node is leased by one check
at a time: spread over workers, each would wait for the lease while the others ran, and the lease deadline timed
out behind 15 checks. Where the driver under test runs on real nodes only, the socket checks and the scenarios lease
those same nodes (their pods held off the kubelet), so they join that group; on kwok nodes nothing changes.
"""

from __future__ import annotations

import pytest

from dra_conformance.plugin import stash

GROUP = "real-node"
# Fixtures whose checks lease the driver's nodes: socket checks (`held_nodes`), scenarios (`scenario_node`), and
# checks that stop and start the driver (`disruption`).
LEASING_FIXTURES = frozenset({"held_nodes", "scenario_node", "disruption"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before xdist reads the groups: put the checks that lease a real-nodes-only driver's nodes in GROUP."""
    profile = config.stash.get(stash.PROFILE, None)
    if profile is None or not profile.real_nodes_only:
        return
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & LEASING_FIXTURES and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(GROUP))

"""The downgrade rehearsal's pool check: a switch that changes the pool needs a newer generation, one that does not."""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance.driver.pool import PoolState
from dra_conformance.rollback import driver_versions
from dra_conformance.rollback.driver_versions import BuildStep, check_pool_after_switch, content_digest


def _slice(generation: int, version: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1-d-0"},
        "spec": {
            "driver": "d",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"driverVersion": {"version": version}}}],
        },
    }


def _after_switch(monkeypatch: pytest.MonkeyPatch, published: dict[str, Any], previous: BuildStep) -> BuildStep:
    pool = PoolState("n1", published["spec"]["pool"]["generation"], 1, 1, ("gpu-0",))
    monkeypatch.setattr(driver_versions, "node_pools", lambda *_: {"n1": pool})
    monkeypatch.setattr(driver_versions, "pool_slices", lambda *_: [published])
    step = BuildStep("current")
    check_pool_after_switch(None, "d", "n1", step, previous, 1.0)
    return step


def test_a_switch_that_changes_the_pool_at_the_same_generation_is_not_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = BuildStep("previous", generation=3, content=content_digest([_slice(3, "1.0.0")]))
    step = _after_switch(monkeypatch, _slice(3, "2.0.0"), previous)
    assert step.problems == ["pool generation 3 is not newer than 3 although what the pool says changed"]
    assert not _after_switch(monkeypatch, _slice(4, "2.0.0"), previous).problems


def test_a_switch_to_the_same_content_may_keep_the_generation_but_not_go_back(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = BuildStep("previous", generation=3, content=content_digest([_slice(3, "1.0.0")]))
    assert not _after_switch(monkeypatch, _slice(3, "1.0.0"), previous).problems
    went_back = _after_switch(monkeypatch, _slice(2, "1.0.0"), previous)
    assert went_back.problems == ["pool generation 2 is not newer than 3"]

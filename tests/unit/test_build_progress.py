"""A build says which component of how many it is on, and how long is left, from this machine's earlier builds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dra_conformance.backends.local.build import BinaryBuilder, Component, Step
from dra_conformance.backends.local.build_times import (
    MACHINE,
    TYPICAL,
    TYPICAL_SECONDS,
    BuildTimes,
    Estimate,
    spell_seconds,
)


def test_the_estimate_comes_from_this_machines_builds_and_else_from_the_typical_table(tmp_path: Path) -> None:
    times = BuildTimes(tmp_path)
    assert times.estimate(["kube", "etcd"]).seconds == TYPICAL_SECONDS["kube"] + TYPICAL_SECONDS["etcd"]
    assert times.estimate(["kube"]).source == TYPICAL
    times.record("kube", 412.04)
    assert times.recorded() == {"kube": 412.0}, (tmp_path / "build-times.json").read_text()
    assert times.estimate(["kube"]) == Estimate(412.0, MACHINE)
    mixed = times.estimate(["kube", "etcd"])
    assert (mixed.seconds, mixed.source) == (412.0 + TYPICAL_SECONDS["etcd"], f"{MACHINE} and {TYPICAL}"), mixed


def test_a_damaged_record_is_read_as_none(tmp_path: Path) -> None:
    (tmp_path / "build-times.json").write_text("{not json")
    assert BuildTimes(tmp_path).recorded() == {}
    BuildTimes(tmp_path).record("etcd", 40)
    assert json.loads((tmp_path / "build-times.json").read_text()) == {"etcd": 40}


def test_the_time_left_counts_down_within_a_build_and_adds_the_builds_after_it() -> None:
    step = Step(number=3, of=5, own=600.0, after=300.0, source=MACHINE)
    assert step.left(0.0) == f"component 3 of 5, about 15 min 0 s left ({MACHINE})"
    assert step.left(540.0) == f"component 3 of 5, about 6 min 0 s left ({MACHINE})"
    assert step.left(700.0) == f"component 3 of 5, about 5 min 0 s left (over this build's estimate) ({MACHINE})"
    assert (spell_seconds(1055), spell_seconds(40.4)) == ("17 min 35 s", "40 s")


def _module(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "go.mod").write_text(f"module example.com/{name}\n\ngo 1.22\n")
    (root / name / "main.go").write_text("package main\n\nfunc main() {}\n")


@pytest.mark.needs_go
def test_a_build_of_several_components_numbers_them_and_records_their_times(tmp_path: Path) -> None:
    components = (Component("one", "one", ".", "v1"), Component("two", "two", ".", "v1"))
    for component in components:
        _module(tmp_path / "assets", component.name)
    messages: list[str] = []
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=messages.append)
    built = builder.ensure_many(components)
    starts = [m for m in messages if m.startswith("building ")]
    assert len(starts) == 2, messages
    assert re.match(rf"building one v1: component 1 of 2, about 2 min 0 s left \({TYPICAL}\)", starts[0]), starts
    assert re.match(r"building two v1: component 2 of 2, about 1 min 0 s left", starts[1]), starts
    assert re.match(r"built 2 of 2 components in .* \(expected 2 min 0 s from ", messages[-1]), messages
    assert set(BuildTimes(tmp_path / "cache").recorded()) == {"one", "two"}, messages
    assert all(path.is_file() for path in built.values()), built
    messages.clear()
    assert builder.ensure_many(components) == built
    assert messages == [], f"a cached build said something: {messages}"

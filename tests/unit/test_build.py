"""The build cache is keyed by what decides a binary, and a failed build names its component."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from dra_conformance import paths, versions
from dra_conformance.backends.local.build import COMPONENTS, Binaries, Builder, Component
from dra_conformance.errors import BuildError


def _module(root: Path, name: str, main: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "go.mod").write_text(f"module example.com/{name}\n\ngo 1.22\n")
    (root / name / "main.go").write_text(main)


def test_cache_key_changes_with_module_files_and_flags(tmp_path: Path) -> None:
    _module(tmp_path, "tool", "package main\n\nfunc main() {}\n")
    component = Component("tool", "tool", ".", "v1")
    before = component.cache_key(tmp_path)
    assert Component("tool", "tool", ".", "v1", ldflags="-s").cache_key(tmp_path) != before
    (tmp_path / "tool" / "go.mod").write_text("module example.com/tool\n\ngo 1.23\n")
    assert component.cache_key(tmp_path) != before
    assert component.cache_key(tmp_path).startswith("tool-v1-")


def test_built_binary_is_reused_without_rebuilding(tmp_path: Path) -> None:
    _module(tmp_path / "assets", "tool", "package main\n\nfunc main() {}\n")
    messages: list[str] = []
    builder = Builder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=messages.append)
    component = Component("tool", "tool", ".", "v1")
    first = builder.ensure(component)
    assert first.is_file() and any(m.startswith("built tool") for m in messages), messages
    messages.clear()
    assert builder.ensure(component) == first
    assert messages == [], f"second ensure rebuilt: {messages}"


def test_failed_build_names_component_and_quotes_log_tail(tmp_path: Path) -> None:
    _module(tmp_path / "assets", "broken", "package main\n\nfunc main() { this is not go }\n")
    builder = Builder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=lambda _m: None)
    component = Component("broken", "broken", ".", "v1")
    with pytest.raises(BuildError) as failed:
        builder.ensure(component)
    assert failed.value.component == "broken"
    assert "syntax error" in failed.value.log_tail, failed.value.log_tail
    leftovers = sorted(p.name for p in builder.path(component).parent.iterdir())
    assert leftovers == [], f"partial build output left behind: {leftovers}"


def test_dra_test_driver_is_pinned_and_keyed_by_its_main(tmp_path: Path) -> None:
    assert {c.name for c in COMPONENTS} == {f.name for f in dataclasses.fields(Binaries)}
    component = next(c for c in COMPONENTS if c.name == "dra_test_driver")
    assert component.version == versions.KUBERNETES
    assert f"version.gitVersion={versions.KUBERNETES} " in component.ldflags, component.ldflags
    shutil.copytree(paths.cluster_assets() / component.module, tmp_path / component.module)
    before = component.cache_key(tmp_path)
    main = tmp_path / component.module / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    assert component.cache_key(tmp_path) != before

"""The build cache is keyed by what decides a binary, and a failed build names its component."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from dra_conformance import paths, versions
from dra_conformance.backends.local import build
from dra_conformance.backends.local.build import (
    COMPONENTS,
    REAL_NODE_COMPONENTS,
    Binaries,
    BinaryBuilder,
    Component,
    RealNodeBinaries,
    go_version,
)
from dra_conformance.errors import BuildError, UsageError


def _module(root: Path, name: str, main: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "go.mod").write_text(f"module example.com/{name}\n\ngo 1.22\n")
    (root / name / "main.go").write_text(main)


@pytest.mark.needs_go
def test_cache_key_changes_with_module_files_and_flags(tmp_path: Path) -> None:
    _module(tmp_path, "tool", "package main\n\nfunc main() {}\n")
    component = Component("tool", "tool", ".", "v1")
    before = component.cache_key(tmp_path)
    assert Component("tool", "tool", ".", "v1", ldflags="-s").cache_key(tmp_path) != before
    (tmp_path / "tool" / "go.mod").write_text("module example.com/tool\n\ngo 1.23\n")
    assert component.cache_key(tmp_path) != before
    assert component.cache_key(tmp_path).startswith("tool-v1-")


@pytest.mark.needs_go
def test_built_binary_is_reused_without_rebuilding(tmp_path: Path) -> None:
    _module(tmp_path / "assets", "tool", "package main\n\nfunc main() {}\n")
    messages: list[str] = []
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=messages.append)
    component = Component("tool", "tool", ".", "v1")
    first = builder.ensure(component)
    assert first.is_file() and any(m.startswith("built tool") for m in messages), messages
    messages.clear()
    assert builder.ensure(component) == first
    assert messages == [], f"second ensure rebuilt: {messages}"


@pytest.mark.needs_go
def test_failed_build_names_component_and_quotes_log_tail(tmp_path: Path) -> None:
    _module(tmp_path / "assets", "broken", "package main\n\nfunc main() { this is not go }\n")
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=lambda _m: None)
    component = Component("broken", "broken", ".", "v1")
    with pytest.raises(BuildError) as failed:
        builder.ensure(component)
    assert failed.value.component == "broken"
    assert "syntax error" in failed.value.log_tail, failed.value.log_tail
    leftovers = sorted(p.name for p in builder.path(component).parent.iterdir())
    assert leftovers == [], f"partial build output left behind: {leftovers}"


@pytest.mark.needs_go
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


def _component(components: tuple[Component, ...], name: str) -> Component:
    return next(c for c in components if c.name == name)


def test_real_node_components_are_opt_in_and_match_their_binaries() -> None:
    names = [c.name for c in REAL_NODE_COMPONENTS]
    assert names == [f.name for f in dataclasses.fields(RealNodeBinaries)]
    assert not set(names) & {c.name for c in COMPONENTS}, "the real node tier must not be built by ensure_all"
    for component in REAL_NODE_COMPONENTS:
        assert (paths.cluster_assets() / component.module / "go.mod").is_file(), component


def test_real_node_components_carry_their_build_settings() -> None:
    kubelet = _component(REAL_NODE_COMPONENTS, "kubelet")
    assert kubelet.version == versions.KUBERNETES
    assert kubelet.ldflags == _component(COMPONENTS, "kube").ldflags
    assert f"version.gitVersion={versions.KUBERNETES} " in kubelet.ldflags, kubelet.ldflags
    runc = _component(REAL_NODE_COMPONENTS, "runc")
    assert runc.version == versions.RUNC
    assert "seccomp" in runc.tags.split(), runc.tags
    assert dict(runc.env)["CGO_ENABLED"] == "1"
    for name in ("containerd", "containerd_shim_runc_v2", "ctr"):
        component = _component(REAL_NODE_COMPONENTS, name)
        assert component.version == versions.CONTAINERD
        assert component.module == "containerd"
        assert component.package == f"github.com/containerd/containerd/v2/cmd/{name.replace('_', '-')}"
        assert dict(component.env)["CGO_ENABLED"] == "0"
        assert f"version.Version={versions.CONTAINERD}" in component.ldflags, component.ldflags


def _key_before_tags_and_env(component: Component, assets: Path) -> str:
    # The cache key as computed before Component had tags and env: go.mod, go.sum and main.go only.
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        path = assets / component.module / name
        if path.exists():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    digest.update(f"{component.package}\0{component.ldflags}\0{go_version()}".encode())
    return f"{component.name}-{component.version}-{digest.hexdigest()[:12]}"


@pytest.mark.needs_go
def test_existing_cache_keys_are_unchanged() -> None:
    assets = paths.cluster_assets()
    for component in COMPONENTS:
        if component.source_root is None:  # the wrapper modules that were keyed before; the others came later
            assert component.cache_key(assets) == _key_before_tags_and_env(component, assets), component.name


@pytest.mark.needs_go
def test_cache_key_covers_tags_env_and_every_go_file(tmp_path: Path) -> None:
    _module(tmp_path, "tool", "package main\n\nfunc main() {}\n")
    component = Component("tool", "tool", ".", "v1")
    before = component.cache_key(tmp_path)
    assert dataclasses.replace(component, tags="seccomp").cache_key(tmp_path) != before
    assert dataclasses.replace(component, env=(("CGO_ENABLED", "0"),)).cache_key(tmp_path) != before
    (tmp_path / "tool" / "tools.go").write_text("package main\n")
    with_tools = component.cache_key(tmp_path)
    assert with_tools != before
    (tmp_path / "tool" / "internal").mkdir()
    (tmp_path / "tool" / "internal" / "x.go").write_text("package internal\n")
    assert component.cache_key(tmp_path) != with_tools


@pytest.mark.needs_go
def test_tags_and_env_reach_the_go_command(tmp_path: Path) -> None:
    _module(tmp_path / "assets", "tool", "//go:build sometag\n\npackage main\n\nfunc main() {}\n")
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=lambda _m: None)
    component = Component("tool", "tool", ".", "v1", tags="sometag", env=(("CGO_ENABLED", "0"),))
    built = builder.ensure(component)
    settings = subprocess.run(["go", "version", "-m", str(built)], capture_output=True, text=True, check=True).stdout
    assert "-tags=sometag" in settings and "CGO_ENABLED=0" in settings, settings


# --- modules outside the cluster assets (source_root) --------------------------------------------------------------


def test_a_source_root_module_is_keyed_by_its_own_files_as_an_assets_module_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "go_version", lambda: "go version go0.0 test/test")
    _module(tmp_path / "assets", "tool", "package main\n\nfunc main() {}\n")
    _module(tmp_path / "elsewhere", "tool", "package main\n\nfunc main() {}\n")
    in_assets = Component("tool", "tool", ".", "v1")
    elsewhere = dataclasses.replace(in_assets, source_root=lambda: tmp_path / "elsewhere")
    assert elsewhere.directory(tmp_path / "assets") == tmp_path / "elsewhere" / "tool"
    assert elsewhere.cache_key(tmp_path / "assets") == in_assets.cache_key(tmp_path / "assets"), "one key scheme"
    (tmp_path / "assets" / "tool" / "main.go").write_text("package main\n\n// changed\nfunc main() {}\n")
    before = elsewhere.cache_key(tmp_path / "assets")
    assert in_assets.cache_key(tmp_path / "assets") != before
    assert elsewhere.cache_key(tmp_path / "other-assets") == before, "the assets do not decide it"
    (tmp_path / "elsewhere" / "tool" / "driver.go").write_text("package main\n")
    assert elsewhere.cache_key(tmp_path / "assets") != before


def test_reference_driver_go_is_built_by_ensure_all_from_its_own_module() -> None:
    component = _component(COMPONENTS, "reference_driver_go")
    assert component.source_root is not None
    directory = component.directory(paths.cluster_assets())
    assert directory == paths.reference_driver_go_module() == paths.CHECKOUT / "drivers" / "fake-dra-go"
    module = (directory / "go.mod").read_text()
    assert "module github.com/dra-conformance/drivers/fake-dra-go\n" in module, module
    assert (component.package, component.ldflags, dict(component.env)) == (".", "-s -w", {"CGO_ENABLED": "0"})


@pytest.mark.needs_go
def test_a_source_root_module_builds_in_its_own_directory(tmp_path: Path) -> None:
    _module(tmp_path / "elsewhere", "tool", "package main\n\nfunc main() {}\n")
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=lambda _m: None)
    component = Component("tool", "tool", ".", "v1", source_root=lambda: tmp_path / "elsewhere")
    built = builder.ensure(component)
    settings = subprocess.run(["go", "version", "-m", str(built)], capture_output=True, text=True, check=True).stdout
    assert "mod\texample.com/tool" in settings, settings


# What a runner that built the cache recorded (any `go version` line: it is only hashed).
RECORDED_GO = "go version go1.26.0 linux/amd64"


def _without_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH on which no `go` is found (the machine of a CI job that imported the build)."""
    empty = tmp_path / "no-go-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_a_cached_binary_is_found_without_go_by_the_go_version_it_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _module(tmp_path / "assets", "tool", "package main\n\nfunc main() {}\n")
    component = Component("tool", "tool", ".", "v1")
    entry = tmp_path / "cache" / "bin" / component.cache_key(tmp_path / "assets", RECORDED_GO)
    entry.mkdir(parents=True)
    (entry / "tool").write_text("#!/bin/sh\n")
    (entry / build.GO_RECORD).write_text(RECORDED_GO + "\n")
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=60.0, echo=lambda _: None)
    _without_go(monkeypatch, tmp_path)
    assert builder.ensure(component) == entry / "tool"
    # The module changed since: the entry is not this checkout's build, and without Go none can be made.
    (tmp_path / "assets" / "tool" / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    with pytest.raises(UsageError) as refused:
        builder.ensure(component)
    message = str(refused.value)
    assert "tool v1 is not in the build cache" in message and "--import" in message and "\n" not in message, message

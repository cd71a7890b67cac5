"""Builds the pinned upstream components from their Go modules into a cache keyed by the pinned versions."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_conformance import paths, versions
from dra_conformance.backends.local import build_lock
from dra_conformance.backends.local.build_times import BuildTimes, spell_seconds
from dra_conformance.errors import BuildError, UsageError

# A cold build is silent for minutes; one progress line per interval shows it is alive without flooding CI logs.
PROGRESS_INTERVAL = 30.0
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class Component:
    """One binary built from a Go module: a wrapper module under `clusters/local/`, or one under `source_root`."""

    name: str
    module: str  # directory under clusters/local/ (or under source_root)
    package: str  # package path to build inside that module
    version: str
    ldflags: str = ""
    tags: str = ""  # build tags, passed as `-tags`
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the go command, e.g. CGO_ENABLED
    # Where `module` lies when not under the cluster assets: our own Go programs elsewhere in the checkout (the
    # wheel carries them too). A function, so a missing directory is an error of the build, not of this import.
    source_root: Callable[[], Path] | None = None

    def directory(self, assets: Path) -> Path:
        """The module's directory: under `source_root` where it has one, else under the cluster assets `assets`."""
        root = self.source_root() if self.source_root is not None else assets
        return root / self.module

    def cache_key(self, assets: Path, go: str | None = None) -> str:
        """Hash of everything that decides the binary: module files, package, flags, tags, env and Go version.

        `go` is the `go version` output to key by (default: this machine's Go, which must then be installed).
        """
        digest = hashlib.sha256()
        for name, path in module_files(self.directory(assets)):
            digest.update(name.encode() + b"\0" + path.read_bytes())
        digest.update(f"{self.package}\0{self.ldflags}\0{go or go_version()}".encode())
        # Only when set, so the keys (and cached binaries) of components without tags or env stay what they were.
        if self.tags:
            digest.update(f"\0tags\0{self.tags}".encode())
        for key, value in self.env:
            digest.update(f"\0env\0{key}={value}".encode())
        return f"{self.name}-{self.version}-{digest.hexdigest()[:12]}"


def module_files(module: Path) -> list[tuple[str, Path]]:
    """The files of a wrapper module that decide its binaries: go.mod, go.sum, then every .go file by path.

    Named relative to the module; the order is fixed, so a module holding only go.mod, go.sum and main.go hashes
    exactly as it did when those three were the only files read.
    """
    files = [(name, module / name) for name in ("go.mod", "go.sum") if (module / name).is_file()]
    sources = sorted((path.relative_to(module).as_posix(), path) for path in module.rglob("*.go") if path.is_file())
    return files + sources


def _kube_ldflags() -> str:
    # Without these /version reports v0.0.0 and skew checks in clients misfire.
    major, minor = versions.KUBERNETES.removeprefix("v").split(".")[:2]
    base = "k8s.io/component-base/version"
    return (
        f"-s -w -X {base}.gitVersion={versions.KUBERNETES} -X {base}.gitMajor={major} -X {base}.gitMinor={minor}"
        f" -X {base}.gitTreeState=clean"
    )


# The reference driver's Go build (drivers/fake-dra-go, our own code), which its own profile runs and its image
# ships: static (CGO off), so the image needs nothing beside it.
REFERENCE_DRIVER_GO = Component(
    "reference_driver_go",
    ".",
    ".",
    "v1",
    "-s -w",
    env=(("CGO_ENABLED", "0"),),
    source_root=paths.reference_driver_go_module,
)

COMPONENTS: tuple[Component, ...] = (
    Component("etcd", "etcd", ".", versions.ETCD, "-s -w"),
    Component("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", versions.KWOK, "-s -w"),
    Component("kube", "kube", ".", versions.KUBERNETES, _kube_ldflags()),
    Component(
        "metrics_server",
        "metrics-server",
        "sigs.k8s.io/metrics-server/cmd/metrics-server",
        versions.METRICS_SERVER,
        "-s -w",
    ),
    # Upstream's DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver), from the pinned Kubernetes release.
    Component("dra_test_driver", "dra-test-driver", ".", versions.KUBERNETES, _kube_ldflags()),
    REFERENCE_DRIVER_GO,
)
# The components of COMPONENTS only some runs need, each built when its run does (`select`): metrics-server for a
# cluster with `--metrics metrics-server`, the upstream test driver for a profile that runs it
# (`{bin:dra_test_driver}`). Every other one runs in every local cluster: the reference driver's Go build too, which
# private reference driver instances run whatever driver the profile runs.
ON_DEMAND = frozenset({"metrics_server", "dra_test_driver"})


def select(wanted: Collection[str] = (), *, everything: bool = False) -> tuple[Component, ...]:
    """The components of COMPONENTS to build: those every local cluster runs, plus the `wanted` ones of ON_DEMAND.

    `everything` selects all of COMPONENTS (`build --all`). Names in `wanted` that are no component of COMPONENTS
    are left out: a profile naming such a `{bin:...}` is refused when its command line is rendered.
    """
    return tuple(c for c in COMPONENTS if everything or c.name not in ON_DEMAND or c.name in wanted)


def _containerd_ldflags() -> str:
    # Without it `containerd --version` reports "<version>+unknown", as upstream's Makefile would outside a release.
    return f"-s -w -X github.com/containerd/containerd/v2/version.Version={versions.CONTAINERD}"


def _containerd(name: str) -> Component:
    package = f"github.com/containerd/containerd/v2/cmd/{name.replace('_', '-')}"
    # Pure Go without cgo (as upstream ships its static shim); the cgo-only btrfs snapshotter drops out.
    return Component(
        name, "containerd", package, versions.CONTAINERD, _containerd_ldflags(), env=(("CGO_ENABLED", "0"),)
    )


# The real node tier (opt-in, issue 11): a real kubelet on containerd 2 and runc. Not part of COMPONENTS, so runs
# that do not ask for it never build these. CNI plugins and busybox come from Debian packages instead, listed in
# clusters/local/real-node/debian-packages.txt (with libseccomp-dev and pkg-config, which the runc build needs).
REAL_NODE_COMPONENTS: tuple[Component, ...] = (
    Component("kubelet", "kubelet", ".", versions.KUBERNETES, _kube_ldflags()),
    _containerd("containerd"),
    _containerd("containerd_shim_runc_v2"),
    _containerd("ctr"),
    # Upstream's default build tags; seccomp needs cgo, libseccomp-dev and pkg-config (runc reads its version from
    # the VERSION file it embeds, so no -X is needed).
    Component(
        "runc",
        "runc",
        "github.com/opencontainers/runc",
        versions.RUNC,
        "-s -w",
        tags="seccomp urfave_cli_no_docs",
        env=(("CGO_ENABLED", "1"),),
    ),
    # The sandbox image's program: the local cluster has no registry to pull upstream's pause image from.
    Component("pause", "pause", ".", "v1", "-s -w", env=(("CGO_ENABLED", "0"),)),
)


# kwokctl (same kwok release), built only by bench/cluster_up: its binary runtime, pointed at our binaries, is the
# side-by-side anchor for cluster start time. Not part of COMPONENTS, so `ensure_all` never builds it.
KWOKCTL = Component("kwokctl", "kwokctl", "sigs.k8s.io/kwok/cmd/kwokctl", versions.KWOK, "-s -w")

# Sonobuoy (aggregator and worker sidecar in one static binary, as upstream builds it), built only by
# `dra-conformance image build --image sonobuoy`, which puts it in an image of its own. Not part of COMPONENTS.
SONOBUOY = Component(
    "sonobuoy",
    "sonobuoy",
    "github.com/vmware-tanzu/sonobuoy",
    versions.SONOBUOY,
    f"-s -w -X github.com/vmware-tanzu/sonobuoy/pkg/buildinfo.Version={versions.SONOBUOY}",
    env=(("CGO_ENABLED", "0"),),
)


# `dra-conformance slices check`'s allocator (clusters/local/slice-allocator, our own program): the scheduler's
# structured allocator from the pinned k8s.io/dynamic-resource-allocation (the staging tag of versions.KUBERNETES).
# Built only by that command. Not part of COMPONENTS.
SLICE_ALLOCATOR = Component(
    "slice_allocator", "slice-allocator", ".", versions.KUBERNETES, "-s -w", env=(("CGO_ENABLED", "0"),)
)


def socket_relay(architecture: str) -> Component:
    """The node agent's socket relay (clusters/local/socket-relay), static, for nodes of `architecture` (GOARCH).

    Built only when socket checks reach a driver through a node agent; it is copied into the agent's pod, so it
    must run on the node's architecture, whatever this machine's is.
    """
    return Component(
        "socket_relay", "socket-relay", ".", "v1", "-s -w", env=(("CGO_ENABLED", "0"), ("GOARCH", architecture))
    )


def socket_relay_name(architecture: str) -> str:
    """The relay's file name where images of the suite ship it (`paths.PREBUILT_DIR`)."""
    return f"socket-relay-{architecture}"


# Beside each cached binary: the `go version` output that built it (part of its key), so that a machine without Go
# finds the entry a build here or on another runner (`build --import`) left, by recomputing the key with it.
GO_RECORD = "go-version"


def go_version() -> str:
    """Return `go version` output, part of the cache key; a missing Go is a usage error."""
    try:
        return subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as error:
        raise UsageError(f"go toolchain not usable ({error}); install Go >= 1.26 to build the local cluster") from None


@dataclass(frozen=True)
class Binaries:
    """Paths of the built binaries of COMPONENTS; those of ON_DEMAND are None where the run did not need them."""

    etcd: Path
    kwok: Path
    kube: Path
    reference_driver_go: Path
    # Only for a cluster with `--metrics metrics-server`.
    metrics_server: Path | None = None
    # Only for a profile that runs it (`{bin:dra_test_driver}`).
    dra_test_driver: Path | None = None

    @classmethod
    def of(cls, built: Mapping[str, Path]) -> Binaries:
        """From component name -> path, as `BinaryBuilder.ensure_many` returns it for a selection (`select`)."""
        return cls(
            etcd=built["etcd"],
            kwok=built["kwok"],
            kube=built["kube"],
            reference_driver_go=built["reference_driver_go"],
            metrics_server=built.get("metrics_server"),
            dra_test_driver=built.get("dra_test_driver"),
        )

    def built(self) -> dict[str, Path]:
        """Component name -> path of each binary built (what a profile's `{bin:<component>}` may name)."""
        return {name: path for name, path in vars(self).items() if path is not None}


@dataclass(frozen=True)
class RealNodeBinaries:
    """Paths of the built binaries of the real node tier (one per entry of `REAL_NODE_COMPONENTS`)."""

    kubelet: Path
    containerd: Path
    containerd_shim_runc_v2: Path
    ctr: Path
    runc: Path
    pause: Path


@dataclass(frozen=True)
class Step:
    """Where one build stands in a run of builds, and the seconds expected of it and of the builds after it.

    The expectations come from `BuildTimes.estimate`; `source` says from what.
    """

    number: int = 1
    of: int = 1
    own: float = 0.0
    after: float = 0.0
    source: str = ""

    def left(self, elapsed: float) -> str:
        """The progress after `elapsed` seconds: component 3 of 5, about 9 min 40 s left (and from what)."""
        remaining = max(self.own - elapsed, 0.0) + self.after
        over = " (over this build's estimate)" if elapsed > self.own else ""
        return f"component {self.number} of {self.of}, about {spell_seconds(remaining)} left{over} ({self.source})"


class BinaryBuilder:
    """Builds components into `<cache>/bin/<name>-<version>-<hash>/<name>` unless already there."""

    def __init__(
        self,
        assets: Path,
        cache_dir: Path,
        *,
        timeout: float,
        echo: Callable[[str], None],
        go_env: dict[str, str] | None = None,
    ) -> None:
        """Build from the wrapper modules under `assets` into `cache_dir`, reporting through `echo`.

        `go_env` adds variables to the go command's environment (the cold-build benchmark points GOCACHE at an
        empty directory with it).
        """
        self.assets = assets
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.echo = echo
        self.go_env = go_env or {}
        # Seconds of the latest build this builder ran (recorded in the cache's build times).
        self.last_seconds = 0.0

    def path(self, component: Component) -> Path:
        """Where the cached binary of `component` lives.

        Without Go, the cached binary whose recorded Go version keys it as this checkout's module files would; with
        no such binary, the missing Go is the UsageError, naming the component.
        """
        try:
            go = go_version()
        except UsageError as no_go:
            cached = self._cached_without_go(component)
            if cached is None:
                raise UsageError(
                    f"{component.name} {component.version} is not in the build cache {self.cache_dir / 'bin'} "
                    f"and {no_go} (or import a build: dra-conformance build --import FILE)"
                ) from None
            return cached
        target = self.cache_dir / "bin" / component.cache_key(self.assets, go) / component.name
        record = target.parent / GO_RECORD
        if target.exists() and not record.exists():
            with contextlib.suppress(OSError):  # entries built before the record: a run with Go adds it
                record.write_text(go + "\n")
        return target

    def _cached_without_go(self, component: Component) -> Path | None:
        for entry in sorted((self.cache_dir / "bin").glob(f"{component.name}-{component.version}-*")):
            try:
                go = (entry / GO_RECORD).read_text().strip()
            except OSError:
                continue
            if (entry / component.name).is_file() and component.cache_key(self.assets, go) == entry.name:
                return entry / component.name
        return None

    def ensure_all(self) -> Binaries:
        """Return every binary of COMPONENTS, building the missing ones (`build --all`)."""
        return self.ensure_selected(COMPONENTS)

    def ensure_selected(self, components: tuple[Component, ...]) -> Binaries:
        """Return the binaries of `components` (a `select`ion of COMPONENTS), building the missing ones."""
        return Binaries.of(self.ensure_many(components))

    def ensure_real_node(self) -> RealNodeBinaries:
        """Return every binary of the real node tier, building the missing ones (never done by `ensure_all`)."""
        return RealNodeBinaries(**self.ensure_many(REAL_NODE_COMPONENTS))

    def ensure_many(self, components: tuple[Component, ...]) -> dict[str, Path]:
        """Every binary of `components` by name, building the missing ones with "component N of M" and time left."""
        missing = [component for component in components if not self.path(component).exists()]
        times = BuildTimes(self.cache_dir)
        expected = times.estimate([component.name for component in missing])
        started = time.monotonic()
        for number, component in enumerate(missing, start=1):
            own = times.estimate([component.name]).seconds
            after = times.estimate([later.name for later in missing[number:]]).seconds
            self.ensure(component, Step(number, len(missing), own, after, expected.source))
        if missing:
            cached = len(components) - len(missing)
            self.echo(
                f"built {len(missing)} of {len(components)} components in {spell_seconds(time.monotonic() - started)}"
                f" (expected {spell_seconds(expected.seconds)} from {expected.source}"
                f"{f'; {cached} were cached' if cached else ''})"
            )
        return {component.name: self.path(component) for component in components}

    def ensure(self, component: Component, step: Step | None = None) -> Path:
        """Return the cached binary, building it first if it is missing (one builder at a time)."""
        target = self.path(component)
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with build_lock.hold(Path(str(target.parent) + ".lock"), f"{component.name} {component.version}", self.echo):
            if not target.exists():
                times = BuildTimes(self.cache_dir)
                alone = times.estimate([component.name])
                step = step or Step(own=alone.seconds, source=alone.source)
                self._build(component, target, step)
                times.record(component.name, self.last_seconds)
        return target

    def _build(self, component: Component, target: Path, step: Step) -> None:
        log_dir = self.cache_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{target.parent.name}.log"
        partial = target.with_name(target.name + ".partial")
        tags = ["-tags", component.tags] if component.tags else []
        command = [
            "go",
            "build",
            "-trimpath",
            *tags,
            "-ldflags",
            component.ldflags,
            "-o",
            str(partial),
            component.package,
        ]
        env_prefix = "".join(f"{key}={value} " for key, value in component.env)
        directory = component.directory(self.assets)
        self.echo(f"building {component.name} {component.version}: {step.left(0.0)} (log: {log_path})")
        started = time.monotonic()
        done = threading.Event()

        def progress() -> None:
            while not done.wait(PROGRESS_INTERVAL):
                elapsed = time.monotonic() - started
                self.echo(f"  still building {component.name}: {elapsed:.0f}s elapsed; {step.left(elapsed)}")

        ticker = threading.Thread(target=progress, daemon=True)
        ticker.start()
        try:
            with log_path.open("w") as log:
                log.write(f"$ (cd {directory} && {env_prefix}{' '.join(command)})\n")
                log.flush()
                result = subprocess.run(
                    command,
                    cwd=directory,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=self.timeout,
                    check=False,
                    # The component's env last: it is part of the cache key, so nothing may override it.
                    env={**os.environ, **self.go_env, **dict(component.env)},
                )
            failed = result.returncode != 0
        except subprocess.TimeoutExpired:
            failed = True
            with log_path.open("a") as log:
                log.write(f"\nbuild timed out after {self.timeout:g}s\n")
        finally:
            done.set()
        if failed:
            partial.unlink(missing_ok=True)
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
            raise BuildError(component.name, str(log_path), tail)
        partial.replace(target)
        (target.parent / GO_RECORD).write_text(go_version() + "\n")
        self.last_seconds = time.monotonic() - started
        self.echo(f"built {component.name} in {self.last_seconds:.0f}s")


def echo_stderr(message: str) -> None:
    """Default progress sink: stderr, flushed, so progress survives pytest's output capture."""
    print(message, file=sys.stderr, flush=True)

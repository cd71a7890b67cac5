"""`dra-conformance image build`: OCI image archives of the suite, the reference driver and Sonobuoy, cached.

An image is cached under `<cache>/images/<kind>-<version>-<key>/image.tar`, where the key is the digest of every
input that decides its content (Debian packages and mirrors, the lock file's pins, the checkout files our wheels are
built from, the epoch, the layout of this builder); a warm build looks the key up and copies nothing it need not.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from dra_conformance import paths
from dra_conformance.errors import UsageError
from dra_conformance.image import oci, recipes, rootfs, wheels
from dra_conformance.image.recipes import Recipe

# Bumped whenever the builder changes what an image holds for the same inputs: part of every cache key.
LAYOUT = "5"
# Names left out of the checkout files hashed into the key: caches and what editable installs generate.
_UNHASHED = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist", "kubeletapi"}


@dataclass(frozen=True)
class Built:
    """One image archive: where, its size, manifest digest and name, how long it took, whether it was cached."""

    kind: str
    name: str
    archive: Path
    size: int
    digest: str
    seconds: float
    cached: bool

    def lines(self) -> list[str]:
        """What `image build` prints."""
        how = "cached (warm)" if self.cached else "built (cold)"
        return [
            f"image {self.name} ({self.kind}): {how} in {self.seconds:.1f}s",
            f"  archive: {self.archive}",
            f"  size: {self.size} bytes ({self.size / 2**20:.1f} MiB)",
            f"  digest: {self.digest}",
        ]


def source_files(checkout: Path, roots: tuple[str, ...]) -> list[tuple[str, Path]]:
    """The checkout files under `roots` (files or directories), by relative path, caches left out."""
    found = []
    for root in roots:
        path = checkout / root
        if path.is_file():
            found.append((root, path))
            continue
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted(d for d in subdirs if d not in _UNHASHED and not d.endswith(".egg-info"))
            for name in files:
                if not name.endswith(".pyc"):
                    full = Path(directory, name)
                    found.append((full.relative_to(checkout).as_posix(), full))
    return sorted(found)


def copy_sources(checkout: Path, roots: tuple[str, ...], target: Path) -> Path:
    """Copy the checkout files under `roots` that the cache key hashes to `target` (same relative paths)."""
    for name, path in source_files(checkout, roots):
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
    return target


def cache_key(
    recipe: Recipe, checkout: Path, source_date_epoch: int, prebuilt: Mapping[str, Path] | None = None
) -> str:
    """The digest of every input of `recipe`'s image.

    Packages, mirrors, lock, our sources, epoch, builder layout, and the binaries it ships prebuilt (by name).
    """
    digest = hashlib.sha256()

    def add(label: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        digest.update(f"{label}\0{len(data)}\0".encode() + data)

    add("layout", LAYOUT)
    add("recipe", json.dumps({**asdict(recipe.config), "kind": recipe.kind, "repository": recipe.repository,
                              "distributions": recipe.distributions, "install": recipe.install},
                             sort_keys=True, default=str))  # fmt: skip
    add("debian", "\n".join([recipes.DEBIAN_SUITE, recipes.DEBIAN_VARIANT, *recipes.DEBIAN_SOURCES,
                             *recipes.APT_OPTIONS, *recipes.MMDEBSTRAP_HOOK_DIRS, *recipes.DPKG_OPTIONS]))  # fmt: skip
    add("packages", "\n".join(_listed(recipe.debian_packages)))
    add("lock", "\n".join(pin.line() for pin in wheels.read_lock(recipe.lock)))
    add("epoch", str(source_date_epoch))
    for name, path in source_files(checkout, recipe.sources):
        add(f"source:{name}", path.read_bytes())
    # Only when there are any, so the keys of images that ship none stay what they were.
    for name, path in sorted((prebuilt or {}).items()):
        add(f"prebuilt:{name}", path.read_bytes())
    return digest.hexdigest()


def _listed(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def checkout_root(package_dir: Path) -> Path:
    """The checkout our wheels are built from; a wheel install has none, which is one line saying so."""
    checkout = package_dir.parent
    if not (checkout / "pyproject.toml").is_file() or not (checkout / "drivers").is_dir():
        raise UsageError(
            "image build builds our wheels from the project's pyproject files: run it from a checkout of "
            "dra-conformance (an installed wheel has none)"
        )
    return checkout


class ImageBuilder:
    """Builds (or finds in the cache) the images of `recipes`, writing under `cache_dir/images`."""

    def __init__(
        self,
        checkout: Path,
        cache_dir: Path,
        *,
        echo: Callable[[str], None],
        source_date_epoch: int = recipes.DEFAULT_SOURCE_DATE_EPOCH,
        prebuilt: Mapping[str, Path] | None = None,
    ) -> None:
        """Build from `checkout`'s files into `cache_dir/images`, reporting progress through `echo`.

        `prebuilt` names the binaries (file name -> path here) an image ships in paths.PREBUILT_DIR.
        """
        self.prebuilt = dict(prebuilt or {})
        self.checkout = checkout
        self.root = cache_dir / "images"
        self.echo = echo
        self.epoch = source_date_epoch

    def build(self, recipe: Recipe, install_host_packages: Callable[[Path], None], *, fresh: bool = False) -> Built:
        """The archive of `recipe`'s image: from the cache, else built (`fresh` builds even when cached)."""
        started = time.monotonic()
        key, entry, name = self._identity(recipe)
        archive = entry / "image.tar"
        if archive.is_file() and not fresh:
            return self._built(recipe.kind, name, archive, started, cached=True)
        rootfs.require_root_and_apt()
        install_host_packages(recipes.HOST_PACKAGES)
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(entry) + ".lock"):
            if archive.is_file() and not fresh:  # another build finished it while this one waited
                return self._built(recipe.kind, name, archive, started, cached=True)
            with rootfs.scratch_directory(self.root, f"scratch-{recipe.kind}-{os.getpid()}") as scratch:
                record = self._build_into(recipe, name, scratch, entry)
            (entry / "build.json").write_text(json.dumps({**record, "key": key}, indent=2, sort_keys=True) + "\n")
        return self._built(recipe.kind, name, archive, started, cached=False)

    def _identity(self, recipe: Recipe) -> tuple[str, Path, str]:
        """The cache key of `recipe`'s image, its cache entry and its name."""
        key = cache_key(recipe, self.checkout, self.epoch, self.prebuilt)
        version = wheels.project_version(self.checkout / recipe.distributions[0])[1]
        return key, self.root / f"{recipe.kind}-{version}-{key[:16]}", f"{recipe.repository}:{version}"

    def cached(self, recipe: Recipe) -> Path | None:
        """The cached archive of `recipe`'s image for the current inputs, if one was built."""
        archive = self._identity(recipe)[1] / "image.tar"
        return archive if archive.is_file() else None

    def _built(self, kind: str, name: str, archive: Path, started: float, *, cached: bool) -> Built:
        digest = oci.archive_digest(archive)
        return Built(kind, name, archive, archive.stat().st_size, digest, time.monotonic() - started, cached)

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "SOURCE_DATE_EPOCH": str(self.epoch), "PYTHONHASHSEED": "0"}

    def _build_into(self, recipe: Recipe, name: str, scratch: Path, entry: Path) -> dict[str, object]:
        # The log stays in the cache entry, also after a failure, which names it.
        entry.mkdir(parents=True, exist_ok=True)
        log = entry / "build.log"
        log.write_text("")
        wheel_dir = scratch / "wheels"
        wheel_dir.mkdir()
        environment = self._environment()
        self.echo(f"{recipe.kind}: building our wheels and fetching the locked ones (log: {log})")
        # Built from a copy of exactly the files the key hashed: never from the checkout itself, where setuptools'
        # build/ directories are shared with other builds and with whatever else is in the tree.
        sources = copy_sources(self.checkout, recipe.sources, scratch / "src")
        wheels.build_own([sources / d for d in recipe.distributions], wheel_dir, log, environment)
        wheels.download_locked(recipe.lock, wheel_dir, log, environment)
        pip_wheel = _pip_wheel(wheel_dir)
        target = scratch / "rootfs"
        command = rootfs.mmdebstrap_command(
            suite=recipes.DEBIAN_SUITE,
            variant=recipes.DEBIAN_VARIANT,
            packages=_listed(recipe.debian_packages),
            dpkg_options=recipes.DPKG_OPTIONS,
            apt_options=recipes.APT_OPTIONS,
            hook_dirs=recipes.MMDEBSTRAP_HOOK_DIRS,
            sources=recipes.DEBIAN_SOURCES,
            target=target,
            wheels=wheel_dir,
            pip_wheel=pip_wheel.name,
            install=recipe.install,
            source_date_epoch=self.epoch,
        )
        self.echo(f"{recipe.kind}: mmdebstrap {recipes.DEBIAN_SUITE} ({recipes.DEBIAN_VARIANT}) and pip install")
        rootfs.run_mmdebstrap(command, log, environment)
        rootfs.scrub(target)
        # In every rootfs image, used or not, so the suite and the reference driver share one Debian layer.
        (target / recipes.SUITE_WORKING_DIR.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
        # Under /usr/local, so they go in the image's upper layer and the Debian layer stays shared.
        for file_name, binary in sorted(self.prebuilt.items()):
            shipped = target / str(paths.PREBUILT_DIR).lstrip("/") / file_name
            shipped.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            shutil.copyfile(binary, shipped)
            shipped.chmod(0o755)
        packages = rootfs.installed_packages(target)
        self.echo(f"{recipe.kind}: writing the layers and the archive")
        entries = oci.tree_entries(target, skip=("dev", "proc", "sys"))
        base, python = split_layers(entries, recipes.PYTHON_LAYER_PREFIX)
        layers = [scratch / "debian.tar", scratch / "python.tar"]
        oci.write_layer(base, layers[0], self.epoch)
        oci.write_layer(python, layers[1], self.epoch)
        digest = oci.write_archive(name, recipe.config, layers, entry / "image.tar", self.epoch)
        own = sorted(path.name for path in wheel_dir.glob("*.whl"))
        return {"name": name, "digest": digest, "debian_packages": packages, "wheels": own, "epoch": self.epoch}


def _pip_wheel(wheel_dir: Path) -> Path:
    found = sorted(wheel_dir.glob("pip-*.whl"))
    if not found:
        raise UsageError(f"no pip wheel among {wheel_dir}: the lock file must pin pip (the image's installer)")
    return found[-1]


def split_layers(entries: list[oci.Entry], prefix: str) -> tuple[list[oci.Entry], list[oci.Entry]]:
    """`entries` split into the Debian layer and the layer of `prefix` (with its parent directories' entries)."""
    parents = {str(parent) for parent in Path(prefix).parents} - {"."}
    upper = [e for e in entries if e.path == prefix or e.path.startswith(prefix + "/") or e.path in parents]
    lower = [e for e in entries if not (e.path == prefix or e.path.startswith(prefix + "/"))]
    return lower, upper


@dataclass(frozen=True)
class BinaryImage:
    """An image of one static binary (and an empty /tmp): what it is called, where the binary goes, its config."""

    kind: str
    repository: str
    file_name: str
    config: oci.ImageConfig


SONOBUOY = BinaryImage("sonobuoy", recipes.SONOBUOY_REPOSITORY, "sonobuoy", recipes.SONOBUOY_CONFIG)
REFERENCE_DRIVER = BinaryImage(
    "reference-driver",
    recipes.REFERENCE_DRIVER_REPOSITORY,
    recipes.REFERENCE_DRIVER_FILE,
    recipes.REFERENCE_DRIVER_CONFIG,
)


def binary_image(
    image: BinaryImage, binary: Path, version: str, cache_dir: Path, source_date_epoch: int, fresh: bool = False
) -> Built:
    """The one-binary image of `binary` (cached by the binary's digest; `fresh` writes it even so)."""
    started = time.monotonic()
    content = hashlib.sha256(binary.read_bytes()).hexdigest()
    key = hashlib.sha256(f"{LAYOUT}\0{image.file_name}\0{content}\0{source_date_epoch}".encode()).hexdigest()
    entry = cache_dir / "images" / f"{image.kind}-{version}-{key[:16]}"
    archive = entry / "image.tar"
    name = f"{image.repository}:{version}"
    cached = archive.is_file() and not fresh
    if not cached:
        entry.mkdir(parents=True, exist_ok=True)
        layer = entry / "layer.tar.partial"
        try:
            files = [
                oci.Entry(image.file_name, "file", 0o755, source=binary),
                oci.Entry("tmp", "dir", 0o1777),
            ]
            oci.write_layer(files, layer, source_date_epoch)
            oci.write_archive(name, image.config, [layer], archive, source_date_epoch)
        finally:
            layer.unlink(missing_ok=True)
    digest = oci.archive_digest(archive)
    return Built(image.kind, name, archive, archive.stat().st_size, digest, time.monotonic() - started, cached)


def copy_to(built: Built, output: Path) -> Built:
    """`built` with its archive copied to `output` (a directory gets `<kind>.tar` inside it)."""
    target = output / f"{built.kind}.tar" if output.is_dir() else output
    target.parent.mkdir(parents=True, exist_ok=True)
    # Per process: two builds writing one output at once each replace it whole, never each other's partial copy.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.copyfile(built.archive, partial)
    partial.replace(target)
    return Built(built.kind, built.name, target, built.size, built.digest, built.seconds, built.cached)


def relock(recipe: Recipe, checkout: Path, scratch_parent: Path, echo: Callable[[str], None]) -> list[wheels.Locked]:
    """Resolve `recipe`'s dependencies (and pip, the image's installer) afresh and write its lock file."""
    own = [wheels.project_version(checkout / directory)[0] for directory in recipe.distributions]
    with rootfs.scratch_directory(scratch_parent, f"relock-{recipe.kind}-{os.getpid()}") as scratch:
        log = scratch / "lock.log"
        environment = {**os.environ, "SOURCE_DATE_EPOCH": str(recipes.DEFAULT_SOURCE_DATE_EPOCH)}
        echo(f"{recipe.kind}: building our wheels and resolving {recipe.install} for the image's python3")
        wheels.build_own([checkout / d for d in recipe.distributions], scratch, log, environment)
        report = wheels.resolve(scratch, [recipe.install, "pip"], log, environment)
    pins = wheels.pins_from_report(report, own)
    header = (
        f"The third-party wheels of the {recipe.kind} image (CPython 3.11, manylinux x86_64), one sha256 each.\n"
        f"Regenerate: dra-conformance image lock --image {recipe.kind}. pip is the installer, run from its wheel."
    )
    recipe.lock.parent.mkdir(parents=True, exist_ok=True)
    recipe.lock.write_text(wheels.render_lock(pins, header))
    return pins

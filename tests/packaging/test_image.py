"""Images `dra-conformance image build` writes run: imported into a throwaway containerd and run with `ctr run`.

The containerd, its runc shim, ctr and runc are the real node's cached binaries (`dra-conformance build
--real-node`). Sonobuoy's image is built here (cached by its pinned version: seconds when warm). The rootfs images
(suite, reference driver) are cached by the digest of their inputs and take minutes cold, so this test only runs
the one already built for the checkout's current inputs, when asked to (DRA_CONFORMANCE_IMAGE_TESTS=1), and is
skipped with the command that builds it otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.backends.local.build import REAL_NODE_COMPONENTS, BinaryBuilder
from dra_conformance.backends.registry import socket_relays
from dra_conformance.cli import EXIT_OK, main
from dra_conformance.config import SuiteConfig
from dra_conformance.image import builder, recipes
from dra_conformance.kube.waits import until
from dra_wire.cache import default_cache_dir

pytestmark = [
    # containerd's shims and ctr's fifos live under /run/containerd whatever the config says: never beside the
    # real node's containerd, whose teardown owns that directory.
    pytest.mark.xdist_group("real-node"),
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: containerd and runc need root"),
]

# containerd answers on its socket within a second of start.
CONTAINERD_READY = 30.0
# `ctr images import` of a 50-300 MiB archive, then unpacking it into a snapshot.
IMPORT_TIMEOUT = 180.0
# A container's start plus Python's import of the CLI.
RUN_TIMEOUT = 60.0
NAMESPACE = "dra-conformance-image-test"
# The default run imports only Sonobuoy's 51 MiB image (CI is near its time budget); this opts in to the rootfs
# images (300-400 MiB each, 10-15 s to import) once they are built.
ROOTFS_OPT_IN = "DRA_CONFORMANCE_IMAGE_TESTS"
RUN_DIR = Path("/run/containerd")


@dataclass(frozen=True)
class Containerd:
    """A running throwaway containerd and how to talk to it."""

    ctr: Path
    runc: Path
    address: Path
    runc_root: Path

    def ctr_command(self, *arguments: str, timeout: float) -> subprocess.CompletedProcess[str]:
        command = [str(self.ctr), f"--address={self.address}", f"--namespace={NAMESPACE}", *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _real_node_binaries() -> dict[str, Path]:
    cached = BinaryBuilder(paths.cluster_assets(), default_cache_dir(), timeout=1.0, echo=lambda _: None)
    found = {component.name: cached.path(component) for component in REAL_NODE_COMPONENTS}
    if not all(path.is_file() for path in found.values()):
        pytest.skip("not applicable: the real node's binaries are not built (dra-conformance build --real-node)")
    return found


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    binaries = _real_node_binaries()
    home = tmp_path_factory.mktemp("containerd")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "containerd-shim-runc-v2").symlink_to(binaries["containerd_shim_runc_v2"])
    address = home / "containerd.sock"
    config = home / "config.toml"
    config.write_text(
        f'version = 3\nroot = "{home / "root"}"\nstate = "{home / "state"}"\n'
        f'[grpc]\n  address = "{address}"\n[ttrpc]\n  address = "{address}.ttrpc"\n'
    )
    run_dir_existed = RUN_DIR.exists()
    environment = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    with (home / "containerd.log").open("w") as log:
        process = subprocess.Popen(
            [str(binaries["containerd"]), f"--config={config}"], stdout=log, stderr=subprocess.STDOUT, env=environment
        )
    daemon = Containerd(binaries["ctr"], binaries["runc"], address, home / "runc")
    try:
        until(
            lambda: daemon.ctr_command("version", timeout=10.0).returncode,
            lambda code: code == 0,
            timeout=CONTAINERD_READY,
            what=f"throwaway containerd answers on {address} (log {home / 'containerd.log'})",
        )
        yield daemon
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=CONTAINERD_READY)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        subprocess.run(["umount", "--recursive", "--lazy", str(home / "root")], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
        if not run_dir_existed:
            shutil.rmtree(RUN_DIR, ignore_errors=True)


def _archive(kind: str, tmp_path: Path) -> Path:
    if kind in ("sonobuoy", "reference-driver"):  # one static Go binary each: seconds from the build cache
        assert main(["image", "build", "--image", kind, "--output", str(tmp_path)]) == EXIT_OK
        return tmp_path / f"{kind}.tar"
    if os.environ.get(ROOTFS_OPT_IN) != "1":
        pytest.skip(f"not selected: importing a rootfs image costs 10-15 s; {ROOTFS_OPT_IN}=1 runs it when it is built")
    recipe = recipes.RECIPES[kind]
    prebuilt = socket_relays(SuiteConfig(), recipe.relay_architectures)
    images = builder.ImageBuilder(
        builder.checkout_root(paths.PACKAGE_DIR), default_cache_dir(), echo=print, prebuilt=prebuilt
    )
    cached = images.cached(recipe)
    if cached is None:
        pytest.skip(
            f"not built for this checkout: `dra-conformance image build --image {kind}` builds it (minutes cold, "
            "root); this test never builds a rootfs image cold"
        )
    return cached


# The image, the command its container runs, and what that command prints.
RUNS = {
    "sonobuoy": (("/sonobuoy", "version"), r"Sonobuoy Version: v0\.57\.4"),
    "reference-driver": (("/fake-dra", "--help"), r"usage: fake-dra .*registered --socket"),
    "suite": (("dra-conformance", "--help"), r"usage: dra-conformance .*\{.*image.*\}"),
}


@pytest.mark.parametrize("kind", list(RUNS))
def test_built_image_imports_into_containerd_and_runs(kind: str, containerd: Containerd, tmp_path: Path) -> None:
    archive = _archive(kind, tmp_path)
    imported = containerd.ctr_command("images", "import", str(archive), timeout=IMPORT_TIMEOUT)
    assert imported.returncode == 0, f"ctr images import {archive}: {imported.stderr}"
    listed = containerd.ctr_command("images", "ls", "--quiet", timeout=RUN_TIMEOUT).stdout.split()
    [name] = [image for image in listed if recipes_repository(kind) in image]
    command, expected = RUNS[kind]
    container = f"image-test-{kind}-{os.getpid()}"
    ran = containerd.ctr_command(
        "run", "--rm", f"--runc-binary={containerd.runc}", f"--runc-root={containerd.runc_root}",
        name, container, *command, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0 and re.search(expected, output, re.DOTALL), f"{name} {' '.join(command)}: {output}"
    containerd.ctr_command("images", "rm", name, timeout=RUN_TIMEOUT)


def recipes_repository(kind: str) -> str:
    """The repository part of `kind`'s image name."""
    if kind == "sonobuoy":
        return recipes.SONOBUOY_REPOSITORY
    return recipes.REFERENCE_DRIVER_REPOSITORY if kind == "reference-driver" else recipes.RECIPES[kind].repository

"""Building image archives (the reference driver's, as the shipped profile installs it; the suite's) for tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig

# The image from the build cache takes a second; a cold build (Debian root file system, wheels) takes minutes.
IMAGE_BUILD_DEADLINE = 1200.0
# Kept of the build's output for a failure message.
OUTPUT_TAIL = 3000
# The reference driver as a vendor ships it: its image and DaemonSet, on the real node only.
SHIPPED_PROFILE = paths.fixtures_dir() / "profiles" / "reference-driver-shipped.yaml"
# The same driver from a chart rendered as vendors' are, fixed by the profile's declared transforms.
VENDOR_CHART_PROFILE = paths.fixtures_dir() / "profiles" / "reference-driver-vendor-chart.yaml"


def build_image(kind: str, output: Path) -> str | None:
    """`dra-conformance image build --image KIND --output OUTPUT`; None once built, else its output."""
    command = ["image", "build", "--image", kind, "--output", str(output)]
    build = subprocess.run(
        [sys.executable, "-m", "dra_conformance.cli", *command],
        capture_output=True,
        text=True,
        timeout=IMAGE_BUILD_DEADLINE,
        check=False,
    )
    return None if build.returncode == 0 else (build.stdout + build.stderr)[-OUTPUT_TAIL:]


def build_reference_image(output: Path) -> str | None:
    """The reference driver's image archive at `output` (`build_image`)."""
    return build_image("reference-driver", output)


@contextlib.contextmanager
def shipped_driver_cluster(
    state_dir: Path, real_nodes: int = 1, profile: Path = SHIPPED_PROFILE
) -> Iterator[LocalBackend]:
    """A local cluster (not started) whose `real_nodes` run the driver as `profile` ships it; stopped on the way out."""
    failed = build_reference_image(paths.CHECKOUT / "reports" / "images" / "reference-driver.tar")
    assert failed is None, f"image build: {failed}"
    backend = LocalBackend(
        LocalClusterConfig(
            state_dir=state_dir,
            profile=profile,
            real_node=True,
            real_nodes=real_nodes,
            nodes=1,
            owner_pid=os.getpid(),
        ),
        echo=lambda _: None,
    )
    try:
        yield backend
    finally:
        backend.stop()

"""Building image archives (the reference driver's, as the shipped profile installs it; the suite's) for tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The image from the build cache takes a second; a cold build (Debian root file system, wheels) takes minutes.
IMAGE_BUILD_DEADLINE = 1200.0
# Kept of the build's output for a failure message.
OUTPUT_TAIL = 3000


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

"""What goes into each image `dra-conformance image build` makes: Debian packages, our distributions, entrypoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dra_conformance.image.oci import ImageConfig

IMAGE_DIR = Path(__file__).resolve().parent
# Debian release and mirrors of the root filesystem (deb.debian.org is the mirror network's own name, so it works
# wherever Debian's packages are reachable); bookworm-updates and the security suite keep it patched.
DEBIAN_SUITE = "bookworm"
DEBIAN_SOURCES: tuple[str, ...] = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# mmdebstrap's apt variant: the Essential packages and apt, then what the image's list names.
DEBIAN_VARIANT = "apt"
# Only what the listed packages depend on, never their Recommends.
APT_OPTIONS: tuple[str, ...] = ('APT::Install-Recommends "false"',)
# mmdebstrap's merged-/usr hook lays out the merged /usr itself, so the usrmerge package (and the 40 MiB of perl it
# pulls in) is not installed.
MMDEBSTRAP_HOOK_DIRS: tuple[str, ...] = ("/usr/share/mmdebstrap/hooks/merged-usr",)
# Documentation, manual pages and translations are left out of the image; copyright files stay (licences).
DPKG_OPTIONS: tuple[str, ...] = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# The time every file of an image carries and its config's `created`, unless SOURCE_DATE_EPOCH says otherwise:
# fixed, so a build from the same files gives the same digest on any day (2026-01-01T00:00:00Z).
DEFAULT_SOURCE_DATE_EPOCH = 1767225600
# Where the Python packages land (pip in the image's chroot): one layer of its own above the Debian one.
PYTHON_LAYER_PREFIX = "usr/local"
# Where the suite's container writes its reports (`run` writes under the current directory).
SUITE_WORKING_DIR = "/var/lib/dra-conformance"
_RUNTIME_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED=1",
    "LANG=C.UTF-8",
)


@dataclass(frozen=True)
class Recipe:
    """One rootfs image: its Debian packages, our distributions (checkout dirs), what pip installs, its config."""

    kind: str
    repository: str
    debian_packages: Path  # list file: one package a line
    distributions: tuple[str, ...]  # directories of our pyproject files, relative to the checkout
    install: str  # the distribution pip installs (with its dependencies, all from the wheels we provide)
    lock: Path
    config: ImageConfig
    # Files of the checkout that decide our wheels' content (relative; directories are walked).
    sources: tuple[str, ...] = field(default=())
    # Node architectures (GOARCH) whose node-agent socket relay the image ships in paths.PREBUILT_DIR: the image
    # has no Go to build it, and a pod of the suite may reach nodes of another architecture than its own.
    relay_architectures: tuple[str, ...] = ()


SUITE = Recipe(
    kind="suite",
    repository="dra-conformance.io/suite",
    debian_packages=IMAGE_DIR / "debian-packages.txt",
    distributions=(".", "drivers/dra-wire", "drivers/fake-metrics"),
    install="dra-conformance",
    lock=IMAGE_DIR / "locks" / "suite.txt",
    # In a pod, `run --cluster existing` without --kubeconfig uses the pod's ServiceAccount (in-cluster config).
    config=ImageConfig(
        entrypoint=("/usr/local/bin/dra-conformance",),
        cmd=("run", "--cluster", "existing"),
        env=_RUNTIME_ENV,
        working_dir=SUITE_WORKING_DIR,
        labels={"org.opencontainers.image.title": "dra-conformance suite"},
    ),
    sources=(
        "pyproject.toml",
        "README.md",
        "dra_conformance",
        "suites",
        "fixtures",
        "clusters",
        "drivers/dra-wire",
        "drivers/fake-dra-go",  # the suite's wheel carries the reference driver's module and manifests (pyproject.toml)
        "drivers/fake-metrics",
    ),
    relay_architectures=("amd64", "arm64"),
)

# The reference driver's image: its Go build (drivers/fake-dra-go), static, alone in the image as `/fake-dra`. With
# no shell in it, its DaemonSet's readiness probe is the binary's own `registered` command.
REFERENCE_DRIVER_REPOSITORY = "dra-conformance.io/fake-dra"
REFERENCE_DRIVER_FILE = "fake-dra"
# The tag the shipped manifests name (fixtures/shipped/reference-driver/daemonset.yaml).
REFERENCE_DRIVER_VERSION = "0.1.0"
# Runs as root: it creates sockets in the kubelet's plugin directories and CDI specs on the host.
REFERENCE_DRIVER_CONFIG = ImageConfig(
    entrypoint=(f"/{REFERENCE_DRIVER_FILE}",),
    env=("PATH=/",),
    working_dir="/",
    labels={"org.opencontainers.image.title": "dra-conformance reference DRA driver (fake-dra, Go build)"},
)

RECIPES: dict[str, Recipe] = {recipe.kind: recipe for recipe in (SUITE,)}

# Sonobuoy's aggregator (and worker sidecar) image: the one static binary, as upstream ships it on a static base;
# /tmp for the results it collects when no volume is mounted there.
SONOBUOY_REPOSITORY = "dra-conformance.io/sonobuoy"
SONOBUOY_CONFIG = ImageConfig(
    cmd=("/sonobuoy", "aggregator", "--no-exit", "-v", "3", "--logtostderr"),
    env=("PATH=/",),
    working_dir="/",
    labels={"org.opencontainers.image.title": "Sonobuoy (built from its Go module by dra-conformance)"},
)
IMAGE_KINDS = (*RECIPES, "reference-driver", "sonobuoy")
# The host packages `image build` needs (mmdebstrap writes the Debian root filesystem).
HOST_PACKAGES = IMAGE_DIR / "host-packages.txt"

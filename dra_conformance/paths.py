"""Where the data the engine ships lives: the scenario catalog, the RBAC matrix, the cluster assets and the suites.

An installed wheel carries them inside the package (`dra_conformance/fixtures`, `clusters`, `suites`,
`reference_driver_go`); a checkout (editable install) keeps them at the top of the repository (the last one under
`drivers/`). Nothing else in the engine climbs the directory tree. Every default here
has an override on the command line:

- scenario catalog: `--dra-catalog DIR` (pytest);
- authorization matrix: `--dra-rbac-matrix FILE` (pytest);
- local cluster state: `--state-dir DIR` (CLI) / `--dra-state-dir DIR` (pytest);
- build cache: `--cache-dir DIR` (CLI) / `--dra-cache-dir DIR` (pytest), else `$XDG_CACHE_HOME/dra-conformance`;
- reports: `--reports-dir DIR` (CLI) / `--dra-reports-dir DIR` (pytest), else `<rootdir>/reports`.
"""

from __future__ import annotations

from pathlib import Path

from dra_conformance.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT = PACKAGE_DIR.parent


# Where an image of the suite keeps binaries built for it (the suite's image has no Go toolchain to build them).
PREBUILT_DIR = Path("/usr/local/libexec/dra-conformance")


def prebuilt_binary(name: str) -> Path | None:
    """The binary `name` an image of the suite ships in PREBUILT_DIR, or None where there is none."""
    path = PREBUILT_DIR / name
    return path if path.is_file() else None


def installed() -> bool:
    """True when running from a wheel (the data sits inside the package), False in a checkout."""
    return (PACKAGE_DIR / "fixtures").is_dir()


def _data(wheel_path: str, checkout_path: str) -> Path:
    if installed():
        return PACKAGE_DIR / wheel_path
    if (CHECKOUT / "clusters" / "local").is_dir():
        return CHECKOUT / checkout_path
    raise UsageError(f"dra-conformance data not found in {PACKAGE_DIR} nor in a checkout at {CHECKOUT}; reinstall it")


def fixtures_dir() -> Path:
    """`fixtures/`: scenarios, the RBAC matrix, driver profiles."""
    return _data("fixtures", "fixtures")


def scenario_catalog() -> Path:
    """The default scenario catalog directory."""
    return fixtures_dir() / "scenarios"


def rbac_matrix() -> Path:
    """The default authorization matrix."""
    return fixtures_dir() / "rbac" / "matrix.yaml"


def overprivileged_driver_role() -> Path:
    """The over-privileged RBAC variant the least-privilege audit must flag."""
    return fixtures_dir() / "rbac" / "overprivileged-driver.yaml"


def reference_driver_profile() -> Path:
    """The driver profile of the reference driver: the default driver under test."""
    return fixtures_dir() / "profiles" / "reference-driver.yaml"


def cluster_assets() -> Path:
    """`clusters/local/`: the Go wrapper modules of the pinned binaries and kwok's stages."""
    return _data("clusters", "clusters") / "local"


def reference_driver_go_module() -> Path:
    """`drivers/fake-dra-go/`: the reference driver's Go module (built like the pinned binaries) and its manifests."""
    return _data("reference_driver_go", "drivers/fake-dra-go")


def reference_driver_rbac() -> Path:
    """The reference driver's least-privilege RBAC (shared with its in-cluster deploy manifests)."""
    return reference_driver_go_module() / "deploy" / "rbac.yaml"


def suites_dir() -> Path:
    """The bundled conformance suites (the `dra_conformance.suites` package; `suites/` in a checkout)."""
    return _data("suites", "suites")


def default_state_root() -> Path:
    """Where local clusters keep their state: `reports/clusters/` of the checkout, or of the current directory."""
    return (Path.cwd() if installed() else CHECKOUT) / "reports" / "clusters"

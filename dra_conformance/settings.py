"""The settings the CLI and the pytest plugin share: one table, one spelling each, and every former spelling.

A setting named `state-dir` is `--state-dir` on every `dra-conformance` command that takes it and `--dra-state-dir`
in pytest. The CLI's flags and the plugin's options of these settings are both generated from `SHARED`, and so is
the README's option reference (`reference_markdown`). A spelling a release dropped is refused in one line naming
the one to use (`former_spelling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dra_conformance.config import METRICS_IMPLEMENTATIONS, SuiteConfig

PLUGIN_PREFIX = "--dra-"
# The cluster backends by name (backends.registry.BACKENDS holds their code; a unit test keeps the two in step).
BACKEND_NAMES = ("local", "existing", "kind")

Kind = Literal["path", "text", "count", "choice"]


@dataclass(frozen=True)
class Setting:
    """One setting: its name, its value's kind, its default as users read it, its help, and who takes it."""

    name: str
    kind: Kind
    default: str
    help: str
    # The `dra-conformance` commands that take it as `--<name>` (`sonobuoy run` is spelled "sonobuoy").
    commands: tuple[str, ...]
    choices: tuple[str, ...] = ()
    metavar: str = ""

    @property
    def flag(self) -> str:
        """The CLI's spelling: `--state-dir`."""
        return f"--{self.name}"

    @property
    def plugin_option(self) -> str:
        """The pytest plugin's spelling: `--dra-state-dir`."""
        return PLUGIN_PREFIX + self.name

    def help_text(self) -> str:
        """The help line with its default."""
        return f"{self.help} (default: {self.default})"


SHARED: tuple[Setting, ...] = (
    Setting(
        "cluster",
        "choice",
        "local",
        "cluster backend: local (the embedded cluster), existing (any kubeconfig; never created or deleted) or kind",
        ("run", "explore"),
        choices=BACKEND_NAMES,
    ),
    Setting(
        "kubeconfig",
        "path",
        "$KUBECONFIG's first file; in a pod, the pod's ServiceAccount",
        "kubeconfig of the existing cluster",
        ("run", "explore", "slices"),
        metavar="FILE",
    ),
    Setting(
        "context",
        "text",
        "the kubeconfig's current context",
        "kubeconfig context of the existing cluster",
        ("run", "explore", "slices"),
        metavar="NAME",
    ),
    Setting(
        "profile",
        "path",
        "the reference driver's bundled profile",
        "driver profile of the driver under test",
        ("build", "run", "explore", "cluster"),
        metavar="FILE",
    ),
    Setting(
        "nodes",
        "count",
        str(SuiteConfig.nodes),
        "fake nodes of the local cluster (kind: workers)",
        ("run", "explore", "cluster"),
        metavar="N",
    ),
    Setting(
        "real-nodes",
        "count",
        str(SuiteConfig.real_nodes),
        "real nodes of the local cluster where it has real nodes (--real-node): the first in this machine's "
        "namespaces, each further one in its own mount and network namespaces",
        ("run", "cluster"),
        metavar="N",
    ),
    Setting(
        "state-dir",
        "path",
        "reports/clusters/local",
        "state directory of the local cluster (logs, kubeconfig, PKI)",
        ("run", "explore", "cluster"),
        metavar="DIR",
    ),
    Setting(
        "cache-dir",
        "path",
        "$XDG_CACHE_HOME/dra-conformance, else ~/.cache/dra-conformance",
        "build cache of the pinned binaries, images and tools",
        ("build", "cluster", "run", "explore", "report", "image", "sonobuoy", "slices"),
        metavar="DIR",
    ),
    Setting(
        "reports-dir",
        "path",
        "<rootdir>/reports",
        "where runs write reports/<run-id>/ and where `report RUN` and `verdict RUN` look them up",
        ("run", "report", "verdict"),
        metavar="DIR",
    ),
    Setting(
        "metrics",
        "choice",
        "fake",
        "Metrics API of the local cluster: fake (reference adapter, v1 and v1beta1), metrics-server (v1beta1), none",
        ("build", "run", "cluster"),
        choices=METRICS_IMPLEMENTATIONS,
    ),
)

BY_NAME: Mapping[str, Setting] = {setting.name: setting for setting in SHARED}

# Plugin options that were renamed to a shared setting's spelling: `--dra-<old>` is now `--dra-<new>`.
RENAMED = {"cluster-state-dir": "state-dir", "metrics-implementation": "metrics"}

# The plugin's options before every one of them took the `--dra-` prefix (the run's own flags kept their names).
PREFIXLESS = frozenset(
    {"audit-log", "canary-allocation-slo", "canary-error-budget", "canary-ready-slo", "canary-tolerance", "catalog"}
    | {"cluster-state-dir", "keep-cluster", "keep-cluster-for-next-run", "keep-resources", "metrics-freshness-slo"}
    | {"metrics-implementation", "metrics-watch", "no-mask", "rbac-matrix", "rollback-drive", "rollback-phase"}
    | {"rollback-resource", "rollback-state", "strictness", "workload-image"}
)


def shared_by(command: str) -> tuple[Setting, ...]:
    """The shared settings a `dra-conformance` command takes as flags."""
    return tuple(setting for setting in SHARED if command in setting.commands)


def former_spelling(arg: str, run_flags: frozenset[str] = frozenset()) -> str | None:
    """The one line for `arg` when it is a former spelling, naming the one to use; None when it is not.

    `run_flags` are the flags of the command whose extra arguments go to pytest (`run`): a renamed setting that is
    one of them is named by its flag too.
    """
    if not arg.startswith("--"):
        return None
    name = arg.removeprefix("--").split("=", 1)[0]
    if name.startswith(PLUGIN_PREFIX[2:]) and name.removeprefix(PLUGIN_PREFIX[2:]) in RENAMED:
        new = RENAMED[name.removeprefix(PLUGIN_PREFIX[2:])]
        also = f" (dra-conformance run: --{new})" if f"--{new}" in run_flags else ""
        return f"--{name} is now {PLUGIN_PREFIX}{new}{also}"
    if name in PREFIXLESS:
        new = RENAMED.get(name, name)
        if f"--{new}" in run_flags:
            return f"--{name} is now --{new} (pytest: {PLUGIN_PREFIX}{new})"
        return f"--{name} is now {PLUGIN_PREFIX}{new} (every pytest option of dra-conformance starts with --dra-)"
    return None


def kubeconfig_from(environ: Mapping[str, str]) -> Path | None:
    """The first file of `$KUBECONFIG` (a list, as kubectl reads it), or None when it names none."""
    listed = [part for part in environ.get("KUBECONFIG", "").split(":") if part]
    return Path(listed[0]) if listed else None


# A command as users type it, where its name in `Setting.commands` is shorter.
SPELLED = {"sonobuoy": "sonobuoy run"}


def reference_markdown() -> str:
    """The README's option reference: one row per shared setting, generated from `SHARED`."""
    rows = [
        "| setting | `dra-conformance` commands | pytest | value | default |",
        "|---|---|---|---|---|",
    ]
    for setting in SHARED:
        value = ", ".join(setting.choices) if setting.choices else setting.metavar
        commands = ", ".join(f"`{SPELLED.get(command, command)}`" for command in setting.commands)
        rows.append(
            f"| `{setting.flag}`: {setting.help} | {commands} | `{setting.plugin_option}` | {value} | "
            f"{setting.default} |"
        )
    return "\n".join(rows) + "\n"

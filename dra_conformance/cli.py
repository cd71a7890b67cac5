"""`dra-conformance`: certify a Kubernetes DRA driver (and check the resource Metrics API) on a real cluster.

dra-conformance build [--all | --profile P --metrics M] [--cache-dir DIR] [--export FILE | --import FILE]
dra-conformance cluster up|down|status|kubeconfig [--nodes N] [--state-dir DIR]
dra-conformance run [--cluster local|existing|kind] [--kubeconfig FILE] [--context NAME] [pytest args...]
dra-conformance explore [--profile P] [--seed N | --replay SEED] [--max-steps N] [--max-examples N] [--budget-seconds S]
dra-conformance report RUN [--serve [--port N]]
dra-conformance report --fleet DIR_OR_TARBALL... [--stale-after 36h] [--output DIR] [--history FILE|URL] [--since 14d]
dra-conformance verdict RUN [--reports-dir DIR]
dra-conformance obligations [--output FILE]
dra-conformance sonobuoy run --profile P --cluster-name NAME [--kubeconfig PATH] [--output DIR] [run args...]
dra-conformance sonobuoy results DIR_OR_TARBALL
dra-conformance sonobuoy-plugin --profile P --cluster-name NAME [--image REF] [--namespace NS] [--rbac] [run args...]
dra-conformance image build|lock [--image suite|reference-driver|sonobuoy] [--output PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dra_conformance import paths, settings, versions
from dra_conformance.backends.build_archive import export_binaries, import_binaries
from dra_conformance.backends.registry import (
    build_local_binaries,
    build_reference_driver_go,
    build_slice_allocator,
    build_sonobuoy,
    install_host_packages,
    install_real_node_packages,
    make_backend,
    real_node_blocker,
    socket_relays,
)
from dra_conformance.config import SuiteConfig
from dra_conformance.cpus import MAX_DEFAULT_WORKERS, WORKERS_PER_CPU, available_cpus, default_workers
from dra_conformance.driver import slice_check
from dra_conformance.driver.confinement import host_paths_line
from dra_conformance.driver.profile import DriverProfile, load_profile
from dra_conformance.errors import BuildError, ConformanceError, UsageError
from dra_conformance.explore import runner as explore_runner
from dra_conformance.image import builder as image_builder
from dra_conformance.image import recipes as image_recipes
from dra_conformance.kube.client import client_from_kubeconfig, in_cluster_kubeconfig
from dra_conformance.model.obligations import Registry, RegistryError
from dra_conformance.model.records import read_records
from dra_conformance.reader_may_leave import stdout_reader_may_leave
from dra_conformance.report.allure_html import RunRenderer, report_command
from dra_conformance.report.flakes import FLAKE_JSON, flake_record, read_outcomes, write_flake_record
from dra_conformance.report.flakes import render as render_flakes
from dra_conformance.report.fleet.command import DEFAULT_HISTORY, fleet_command
from dra_conformance.report.fleet.durations import parse_duration, spell_duration
from dra_conformance.report.fleet.merge import DEFAULT_STALE_AFTER
from dra_conformance.report.obligations_doc import render as render_obligations
from dra_conformance.sonobuoy import entry as sonobuoy_entry
from dra_conformance.sonobuoy import plugin as sonobuoy_plugin
from dra_conformance.sonobuoy import protocol as sonobuoy_protocol
from dra_conformance.sonobuoy import retrieved as sonobuoy_retrieved
from dra_conformance.sonobuoy import runner as sonobuoy_runner
from dra_conformance.sonobuoy.part import Part as SonobuoyPart
from dra_conformance.timeouts import Timeouts, timeout_option
from dra_conformance.verdict import FINDINGS_JSON, FindingsError
from dra_conformance.verdict import replay as replay_verdict
from dra_wire import kubelet_api
from dra_wire.cache import default_cache_dir
from dra_wire.kubelet_api import BindingsError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, suite_options: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `run`'s help also lists the suite's pytest options, grouped as the plugin registers them.
        self.suite_options = suite_options

    def format_help(self) -> str:
        shown = super().format_help()
        return shown + "\n" + suite_options_help() if self.suite_options else shown

    def error(self, message: str) -> None:  # type: ignore[override]
        # One line, non-zero exit: argparse's default prints the whole usage block first.
        self.exit(EXIT_USAGE, f"dra-conformance: error: {message} (see --help)\n")


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        wanted = "0 or more" if minimum == 0 else f"at least {minimum}"
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _workers(text: str) -> int:
    return _whole_number(text, 0)


WORKERS_HELP = (
    f"pytest-xdist workers (default: {WORKERS_PER_CPU} per CPU this process may use, at most {MAX_DEFAULT_WORKERS}; "
    "here {here}); 0 runs the checks in the run's own process, which saves a worker's start (a few CPU-seconds) for "
    "a run of a few checks, but a check that crashes the process ends the run"
)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, got {value:g}")
    return value


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# The deadlines of bringing a cluster up and down, which `cluster up` takes with the plugin's spelling; a host that
# starts many clusters at once (a CI matrix on one machine) lengthens them instead of failing readiness under load.
REPLACE_DRIVER_HELP = (
    "when the local cluster of the state directory runs another profile's driver, replace that driver with this "
    "profile's (its processes, slices, RBAC and node directories; the control plane, nodes and metrics adapter "
    "stay) instead of refusing; for kwok nodes only"
)
CLUSTER_DEADLINES = ("etcd_ready", "apiserver_ready", "node_ready", "driver_ready", "metrics_available", "process_stop")


# How the CLI reads a shared setting's value, by its kind (a choice or a name is the text as given).
CONVERTERS: dict[str, Callable[[str], object]] = {"path": Path, "count": _positive_int, "choice": str, "text": str}


def add_shared(parser: argparse.ArgumentParser, command: str) -> None:
    """Add the shared settings `command` takes (`settings.SHARED`), spelled as everywhere else."""
    for setting in settings.shared_by(command):
        # The choices and the counts have a default the command passes on; a path or a name left out is looked up
        # where it is used ($KUBECONFIG, the checkout's reports/, the build cache).
        default: object = int(setting.default) if setting.kind == "count" else None
        default = setting.default if setting.kind == "choice" else default
        parser.add_argument(
            setting.flag,
            type=CONVERTERS[setting.kind],
            choices=setting.choices or None,
            default=default,
            metavar=setting.metavar or None,
            help=setting.help_text(),
        )


def version_line() -> str:
    """`dra-conformance --version`: this version, the pinned Kubernetes and the commit it was built from."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("dra-conformance")
    except PackageNotFoundError:
        ours = "unknown"
    return f"dra-conformance {ours} (Kubernetes {versions.KUBERNETES}, commit {_commit()})"


def _commit() -> str:
    if paths.installed():
        return "unknown: installed from a wheel"
    try:
        described = subprocess.run(
            ["git", "-C", str(paths.CHECKOUT), "describe", "--always", "--dirty", "--abbrev=12", "--exclude=*"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown: git: {error}"
    return described.stdout.strip()


class _Version(argparse.Action):
    """`--version`: the line is worked out only when asked for (it runs git)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version, the pinned Kubernetes and the commit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_line())
        parser.exit(EXIT_OK)


def suite_options_help() -> str:
    """The plugin's option groups of `pytest --help`, as pytest itself prints them (every `--dra-*` option)."""
    import tempfile

    # In an empty directory, so no ini file or conftest of the caller's adds to them.
    with tempfile.TemporaryDirectory(prefix="dra-conformance-help-") as empty:
        shown = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
            capture_output=True,
            text=True,
            cwd=empty,
            timeout=120,
            check=False,
        )
    groups = plugin_groups(shown.stdout)
    if not groups:
        return f"(pytest --help did not list the suite's options: exit {shown.returncode}: {shown.stderr.strip()})\n"
    return (
        "suite options (pytest plugin): pass them after the run's own flags; each shared setting above is also "
        "--dra-<name>\n\n" + groups
    )


def plugin_groups(pytest_help: str) -> str:
    """The option groups of `pytest --help` text whose title starts with "DRA conformance"."""
    kept: list[str] = []
    keep = False
    for line in pytest_help.splitlines():
        if line and not line[0].isspace():
            keep = line.startswith("DRA conformance")
        if keep:
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the CLI."""
    parser = _Parser(prog="dra-conformance", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    build = commands.add_parser(
        "build",
        help="build the pinned upstream binaries of the local backend (cached)",
        description="Build (or find in the cache) the pinned binaries a local cluster runs with --profile and "
        "--metrics: by default those of a default run (no metrics-server, no upstream test driver); --all builds "
        "every one. A run builds what it lacks itself.",
    )
    add_shared(build, "build")
    build.add_argument(
        "--all",
        dest="everything",
        action="store_true",
        help="every binary a local cluster may run, whatever the profile and --metrics (a CI cache to --export)",
    )
    build.add_argument(
        "--real-node", action="store_true", help="also the real node's binaries and Debian packages (root)"
    )
    build.add_argument(
        "--real-node-auto", action="store_true", help="--real-node where this machine can host a real node"
    )
    build.add_argument(
        "--import",
        dest="import_from",
        type=Path,
        metavar="FILE",
        help="first unpack binaries another machine's `build --export` wrote into the cache (a CI runner's cache)",
    )
    build.add_argument(
        "--export", type=Path, metavar="FILE", help="then write what the build produced to FILE (.tar.gz)"
    )

    cluster = commands.add_parser("cluster", help="manage the embedded local cluster")
    cluster.add_argument("action", choices=["up", "down", "status", "kubeconfig"])
    add_shared(cluster, "cluster")
    cluster.add_argument(
        "--real-node", action="store_true", help="add a real node: kubelet on containerd and runc (root only)"
    )
    cluster.add_argument("--replace-driver", action="store_true", help=REPLACE_DRIVER_HELP)
    for name in CLUSTER_DEADLINES:
        cluster.add_argument(
            timeout_option(name),
            dest=f"timeout_{name}",
            type=_positive_seconds,
            metavar="SECONDS",
            help=f"the {name} deadline (default {getattr(Timeouts(), name):g}s)",
        )

    run = commands.add_parser(
        "run",
        help="run the conformance suites (extra arguments go to pytest)",
        description="Run the conformance suites: start or attach to the cluster, run pytest with the suite's "
        "plugin, print the verdict last. Arguments the run does not know go to pytest (test paths, -k, -x, the "
        "suite options listed at the end).",
        suite_options=True,
    )
    add_shared(run, "run")
    run.add_argument(
        "--real-node",
        action="store_true",
        help="add a real node to the local cluster (root only), for the kubelet-mode checks",
    )
    run.add_argument(
        "--real-node-auto",
        action="store_true",
        help="--real-node where this machine can host a real node (root, writable cgroups, its Debian packages "
        "installable); elsewhere the summary says why not",
    )
    run.add_argument("--replace-driver", action="store_true", help=REPLACE_DRIVER_HELP)
    run.add_argument(
        "--no-html",
        action="store_true",
        help="skip rendering the Allure HTML after the run (a few CPU-seconds; its results stay in allure-results, "
        "and `dra-conformance report RUN` renders them later)",
    )
    workers = default_workers(available_cpus())
    run.add_argument("-n", "--workers", type=_workers, default=workers, help=WORKERS_HELP.format(here=workers))
    run.add_argument(
        "--allow-partial",
        action="store_true",
        help="when the identity lacks rights some suites need, skip those suites' checks instead of refusing the run",
    )
    run.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        help="run the suites N times on one cluster and report each test's pass rate (a failure in any run counts)",
    )
    _add_explore_command(commands)

    report = commands.add_parser(
        "report", help="render a run's Allure results as HTML (Allure 3 on Node.js), or many runs' fleet table"
    )
    report.add_argument("run", nargs="?", help="run id under reports/, or a run's directory")
    report.add_argument(
        "--fleet",
        nargs="+",
        type=Path,
        metavar="DIR_OR_TARBALL",
        help="instead: one table of the latest run of every cluster, from run directories, directories of runs "
        "and tarballs (sonobuoy retrieve); Markdown on stdout",
    )
    report.add_argument(
        "--stale-after",
        type=_duration,
        default=DEFAULT_STALE_AFTER,
        metavar="DURATION",
        help="with --fleet: a cluster whose last run is older than this (36h, 2d, 90m) is stale "
        f"(default {spell_duration(DEFAULT_STALE_AFTER)})",
    )
    report.add_argument("--output", type=Path, help="with --fleet: also write fleet.md, fleet.json, fleet.html there")
    report.add_argument(
        "--history",
        metavar="FILE_OR_URL",
        help="with --fleet: keep every run read in this history and plot it in fleet.html: a SQLite file, or "
        f"postgresql://... for one many CI runners share (default: {DEFAULT_HISTORY} in the reports dir); exit 3 "
        "when a cluster's newest night regressed",
    )
    report.add_argument(
        "--since",
        type=_duration,
        metavar="DURATION",
        help="with --fleet: plot the history's nights of this period only (14d, 36h); default every night stored",
    )
    report.add_argument("--serve", action="store_true", help="then serve the HTML on 127.0.0.1 until Ctrl-C")
    report.add_argument("--port", type=int, default=0, help="port for --serve (default: any free port)")
    add_shared(report, "report")
    verdict = commands.add_parser(
        "verdict",
        help="decide a saved run's verdict again from the findings it recorded (findings.json), with the same rules",
        description="Print the verdict and its reasons, decided again from the run's findings.json: exit 0 when it "
        "equals the verdict the run recorded, 1 when it does not, 2 when the record is missing or malformed.",
    )
    verdict.add_argument("run", help="run id under reports/, or a run's directory")
    add_shared(verdict, "verdict")
    profile = commands.add_parser(
        "profile", help="check driver profiles against the schema: one line per file, exit 2 when any is invalid"
    )
    profile.add_argument("action", choices=["check"])
    profile.add_argument("files", nargs="+", type=Path, metavar="FILE")
    add_slices_parser(commands)
    obligations = commands.add_parser(
        "obligations", help="print the obligations registry and the field coverage table as Markdown"
    )
    obligations.add_argument("--output", type=Path, help="write it to FILE instead (docs/obligations.md)")
    image = commands.add_parser(
        "image", help="build an OCI image archive (suite, reference driver, Sonobuoy) without Docker, or relock one"
    )
    image.add_argument("action", choices=["build", "lock"])
    image.add_argument(
        "--image", choices=image_recipes.IMAGE_KINDS, default="suite", help="which image (default suite)"
    )
    image.add_argument("--output", type=Path, help="copy the archive to PATH (a directory gets <image>.tar)")
    add_shared(image, "image")
    image.add_argument("--rebuild", action="store_true", help="build even when cached (checks the digest reproduces)")
    image.add_argument(
        "--source-date-epoch",
        type=int,
        help="the time of every file and of `created` (default $SOURCE_DATE_EPOCH, else 2026-01-01)",
    )
    _add_sonobuoy_commands(commands)
    return parser


def _add_sonobuoy_commands(commands: Any) -> None:
    plugin = commands.add_parser(
        "sonobuoy-plugin",
        help="print the Sonobuoy plugin definition that runs the suites in-cluster (--rbac: the RBAC it runs with); "
        "extra arguments go to `dra-conformance run` in the pod",
    )
    plugin.add_argument("--profile", type=Path, help="driver profile of the driver installed in the cluster")
    plugin.add_argument("--cluster-name", help="the cluster's name in the reports and the fleet report (required)")
    plugin.add_argument("--image", help=f"the suite's image (default {sonobuoy_plugin.DEFAULT_IMAGE})")
    plugin.add_argument("--namespace", help="the namespace Sonobuoy runs in (default sonobuoy)")
    plugin.add_argument("--rbac", action="store_true", help="print the plugin's ServiceAccount and RBAC instead")
    plugin.add_argument(
        "--api-server-from-host",
        metavar="URL",
        help="for a cluster whose pods have no Service path to the API server (the local cluster): the pod uses its "
        "node's network and this API server address",
    )
    plugin.add_argument(
        "--node",
        action="append",
        default=[],
        help="a node the plugin's pod may run on, whatever its NoSchedule taints (repeatable; default any; the node "
        "part runs on each)",
    )
    _add_part_arguments(plugin)
    entry = commands.add_parser(
        "sonobuoy-entry",
        help="(the plugin's container) run the suites in-cluster, hand their reports to Sonobuoy's worker",
    )
    entry.add_argument("--profile", type=Path, help="the driver profile, mounted from the plugin's ConfigMap")
    entry.add_argument("--cluster-name", help="the cluster's name in the reports")
    entry.add_argument("--results-dir", type=Path, help="Sonobuoy's results directory (default $SONOBUOY_RESULTS_DIR)")
    entry.add_argument(
        "--part", choices=[str(p) for p in SonobuoyPart], default=str(SonobuoyPart.WHOLE), help="the plugin's part"
    )
    entry.add_argument("--scratch-dir", type=Path, help="(the node part) where the run's temporary files go")
    sonobuoy = commands.add_parser(
        "sonobuoy",
        help="run the suites in-cluster through Sonobuoy (cluster-level checks in a Job, node-level checks on each "
        "driver node) and print the merged verdict, or print the merged verdict of a retrieved run",
    )
    actions = sonobuoy.add_subparsers(dest="sonobuoy_action", required=True, parser_class=_Parser)
    run = actions.add_parser(
        "run",
        help="both parts through the pinned Sonobuoy: wait, retrieve, print the merged verdict (exit 0 when "
        "certified); extra arguments go to `dra-conformance run` in the pods",
    )
    run.add_argument("--profile", type=Path, required=True, help="driver profile of the driver installed there")
    run.add_argument("--cluster-name", required=True, help="the cluster's name in the reports and the fleet report")
    run.add_argument("--kubeconfig", type=Path, help="the cluster (default $KUBECONFIG, else ~/.kube/config)")
    run.add_argument(
        "--output", type=Path, help="where the tarball and the merged verdict go (default results/<cluster name>)"
    )
    run.add_argument(
        "--namespace", help=f"the namespace Sonobuoy runs in (default {sonobuoy_protocol.DEFAULT_NAMESPACE})"
    )
    run.add_argument(
        "--image",
        help="the suite's image (default: built and imported where the cluster is the local one; else "
        f"{sonobuoy_plugin.DEFAULT_IMAGE})",
    )
    run.add_argument("--sonobuoy-image", help="Sonobuoy's image (default: ours on the local cluster, else Sonobuoy's)")
    run.add_argument(
        "--node-label",
        metavar="KEY=VALUE",
        help="run the node part on the nodes with this label (default: the nodes the driver publishes ResourceSlices "
        "for)",
    )
    run.add_argument("--kubelet-root", help="the nodes' kubelet root directory (default /var/lib/kubelet)")
    run.add_argument(
        "--wait",
        type=_positive_int,
        default=sonobuoy_runner.DEFAULT_WAIT_MINUTES,
        metavar="MINUTES",
        help=f"how long the parts may take together (default {sonobuoy_runner.DEFAULT_WAIT_MINUTES})",
    )
    add_shared(run, "sonobuoy")
    results = actions.add_parser(
        "results", help="print the merged verdict of a retrieved run (a tarball, or the directory holding it)"
    )
    results.add_argument("path", type=Path, metavar="DIR_OR_TARBALL")
    results.add_argument("--output", type=Path, help="also write the merged summary.json and summary.md there")


def _add_part_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--part",
        choices=[str(p) for p in SonobuoyPart],
        default=str(SonobuoyPart.WHOLE),
        help="whole: every check in one Job (default); cluster: the cluster-level checks in that Job; node: the "
        "node-level checks in a DaemonSet on the driver's nodes (`sonobuoy run` runs both parts)",
    )
    parser.add_argument("--node-label", metavar="KEY=VALUE", help="(--part node) run on the nodes with this label")
    parser.add_argument("--kubelet-root", help="(--part node) the nodes' kubelet root (default /var/lib/kubelet)")


def _sonobuoy_plugin(args: argparse.Namespace, run_args: list[str]) -> int:
    if args.rbac:
        print(sonobuoy_plugin.render_rbac(args.namespace), end="")
        return EXIT_OK
    passed = run_args[1:] if run_args[:1] == ["--"] else run_args
    settings = sonobuoy_plugin.settings_from(
        args.profile,
        args.cluster_name,
        args.image,
        args.namespace,
        passed,
        args.api_server_from_host,
        args.node,
        part=args.part,
        kubelet_root=args.kubelet_root,
        node_label=args.node_label,
    )
    print(sonobuoy_plugin.render_plugin(settings), end="")
    return EXIT_OK


def _sonobuoy_entry(args: argparse.Namespace, run_args: list[str]) -> int:
    results_dir = sonobuoy_entry.results_dir_from(os.environ, args.results_dir)
    passed = run_args[1:] if run_args[:1] == ["--"] else run_args
    return sonobuoy_entry.entry(
        sonobuoy_entry.EntrySettings(
            args.profile,
            args.cluster_name,
            results_dir,
            tuple(passed),
            SonobuoyPart(args.part),
            sonobuoy_entry.node_from(os.environ),
            args.scratch_dir,
        )
    )


def _sonobuoy(args: argparse.Namespace, run_args: list[str]) -> int:
    if args.sonobuoy_action == "results":
        if run_args:
            raise UsageError(f"sonobuoy results: unrecognized arguments: {' '.join(run_args)}")
        tarball = sonobuoy_retrieved.latest_tarball(args.path)
        return sonobuoy_runner.report(tarball, args.output)
    passed = run_args[1:] if run_args[:1] == ["--"] else run_args
    settings = sonobuoy_runner.RunSettings(
        profile=args.profile,
        cluster_name=args.cluster_name,
        kubeconfig=sonobuoy_runner.kubeconfig_path(args.kubeconfig, os.environ),
        output=args.output or Path("results") / args.cluster_name,
        namespace=args.namespace or sonobuoy_protocol.DEFAULT_NAMESPACE,
        image=args.image,
        sonobuoy_image=args.sonobuoy_image,
        node_label=args.node_label,
        kubelet_root=args.kubelet_root,
        wait_minutes=args.wait,
        run_args=tuple(passed),
        cache_dir=args.cache_dir,
    )
    return sonobuoy_runner.run(settings)


def _profile(args: argparse.Namespace) -> int:
    """`profile check FILE...`: each profile validated as a run would, one line each."""
    invalid = 0
    for path in args.files:
        try:
            loaded = load_profile(path)
        except UsageError as error:
            print(error, file=sys.stderr)
            invalid += 1
            continue
        declared = ", ".join(sorted(str(capability) for capability in loaded.capabilities)) or "none"
        version = f" {loaded.version}" if loaded.version else ""
        print(f"{path}: valid: driver {loaded.driver}{version}, capabilities {declared} (sha256 {loaded.digest})")
    return EXIT_USAGE if invalid else EXIT_OK


def add_slices_parser(commands: Any) -> None:
    """`slices check`: a driver's ResourceSlices through the scheduler's own allocator, with no cluster."""
    parser = commands.add_parser(
        "slices",
        help="check ResourceSlices offline with the scheduler's structured allocator: every combination of devices "
        "up to a bound; findings exit 1, bad input 2",
    )
    parser.add_argument("action", choices=["check"])
    parser.add_argument(
        "files", nargs="*", type=Path, metavar="FILE", help="ResourceSlices as YAML or JSON (a list, a List, documents)"
    )
    add_shared(parser, "slices")
    parser.add_argument("--driver", help="only this driver's slices (with --kubeconfig, listed for it)")
    parser.add_argument(
        "--max-devices",
        type=_positive_int,
        default=slice_check.DEFAULT_MAX_DEVICES,
        help=f"the largest combination tried, in devices (default {slice_check.DEFAULT_MAX_DEVICES})",
    )
    parser.add_argument(
        "--max-allocations",
        type=_positive_int,
        default=slice_check.DEFAULT_MAX_ALLOCATIONS,
        help=f"refuse a bound that asks more of the allocator (default {slice_check.DEFAULT_MAX_ALLOCATIONS})",
    )
    parser.add_argument(
        "--shape-attribute",
        metavar="NAME",
        help="group devices by this attribute's value (default: by the counters they consume)",
    )


def _slices(args: argparse.Namespace) -> int:
    """`slices check FILE... [--kubeconfig FILE]`: one line per pool, the findings, one closing line."""
    if not args.files and args.kubeconfig is None:
        raise UsageError("slices check needs ResourceSlices: FILE..., or --kubeconfig to list a cluster's")
    found: list[dict[str, Any]] = []
    sources = [str(path) for path in args.files]
    for path in args.files:
        found += slice_check.load_slices(path)
    if args.kubeconfig is not None:
        api = client_from_kubeconfig(args.kubeconfig, args.context)
        found += slice_check.cluster_slices(api, args.driver, where=str(args.kubeconfig))
        sources.append(f"the cluster of {args.kubeconfig}")
    if args.driver:
        found = [piece for piece in found if piece["spec"]["driver"] == args.driver]
        if not found:
            raise UsageError(f"no ResourceSlices of driver {args.driver} in {', '.join(sources)}")
    binary = build_slice_allocator(SuiteConfig(cache_dir=args.cache_dir))
    report = slice_check.check(
        found,
        slice_check.program_allocator(binary),
        source=", ".join(sources),
        max_devices=args.max_devices,
        max_allocations=args.max_allocations,
        attribute=args.shape_attribute,
    )
    print("\n".join(report.lines()))
    return EXIT_FAILED if report.findings else EXIT_OK


def _obligations(args: argparse.Namespace) -> int:
    try:
        registry = Registry.load()
    except RegistryError as error:
        print(f"dra-conformance: obligations registry: {error}", file=sys.stderr)
        return EXIT_FAILED
    document = render_obligations(registry)
    if args.output:
        args.output.write_text(document)
    else:
        print(document, end="")
    return EXIT_OK


def real_node_choice(args: argparse.Namespace) -> str | None:
    """`--real-node` (yes), `--real-node-auto` (auto) or neither (None)."""
    return "yes" if args.real_node else "auto" if args.real_node_auto else None


def real_node_wanted(choice: str | None, backend: str = "local") -> tuple[bool, str]:
    """Whether to add a real node (choice yes, auto or None), and why not where it is not added."""
    if backend != "local":
        if choice == "yes":
            raise UsageError(f"--real-node adds a node to the local cluster; backend {backend} has its own nodes")
        return False, ""  # the summary says whether the cluster has a node a real kubelet serves
    if choice is None:
        return False, "not asked for (--real-node)"
    if choice == "yes":
        return True, ""
    blocker = real_node_blocker()
    return not blocker, blocker


def _build(args: argparse.Namespace) -> int:
    real_node, why = real_node_wanted(real_node_choice(args))
    if args.real_node_auto and not real_node:
        print(f"no real node: {why}", file=sys.stderr)
    cache_dir = args.cache_dir or default_cache_dir()
    if args.import_from is not None:
        imported = import_binaries(cache_dir, args.import_from)
        print(f"imported {len(imported)} cache entries from {args.import_from}", file=sys.stderr)
    config = SuiteConfig(cache_dir=cache_dir, real_node=real_node, profile=args.profile, metrics=args.metrics)
    binaries = build_local_binaries(config, everything=args.everything)
    for name, path in binaries.items():
        print(f"{name}: {path}")
    print(f"kubelet plugin API bindings: {kubelet_api.bindings_dir()}")
    if args.export is not None:
        exported = export_binaries(cache_dir, binaries, args.export)
        print(f"exported {exported} cache entries to {args.export}", file=sys.stderr)
    return EXIT_OK


def _image(args: argparse.Namespace) -> int:
    # SIGTERM (a CI job cancelled) unwinds like Ctrl-C, so the build's scratch root filesystem is removed.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return _image_command(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _source_date_epoch(args: argparse.Namespace) -> int:
    if args.source_date_epoch is not None:
        return int(args.source_date_epoch)
    # The reproducible-builds convention: a build system that sets it for every tool sets it for this one too.
    text = os.environ.get("SOURCE_DATE_EPOCH", str(image_recipes.DEFAULT_SOURCE_DATE_EPOCH))
    if not text.isdigit():
        raise UsageError(f"SOURCE_DATE_EPOCH={text!r} is not a whole number of seconds")
    return int(text)


def _image_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    cache_dir = args.cache_dir or default_cache_dir()
    epoch = _source_date_epoch(args)
    if args.image in ("sonobuoy", "reference-driver"):
        if args.action == "lock":
            raise UsageError(f"the {args.image} image has no lock file: its Go module's go.sum pins it")
        config = SuiteConfig(cache_dir=cache_dir)
        if args.image == "sonobuoy":
            image, binary, version = image_builder.SONOBUOY, build_sonobuoy(config), versions.SONOBUOY
        else:
            binary, version = build_reference_driver_go(config), image_recipes.REFERENCE_DRIVER_VERSION
            image = image_builder.REFERENCE_DRIVER
        built = image_builder.binary_image(image, binary, version, cache_dir, epoch, args.rebuild)
    else:
        recipe = image_recipes.RECIPES[args.image]
        checkout = image_builder.checkout_root(paths.PACKAGE_DIR)
        if args.action == "lock":
            pins = image_builder.relock(recipe, checkout, cache_dir / "images", echo=_stderr)
            print(f"{recipe.lock}: {len(pins)} wheels pinned")
            return EXIT_OK
        images = image_builder.ImageBuilder(
            checkout,
            cache_dir,
            echo=_stderr,
            source_date_epoch=epoch,
            prebuilt=socket_relays(SuiteConfig(cache_dir=cache_dir), recipe.relay_architectures),
        )
        built = images.build(
            recipe, lambda packages: install_host_packages(packages, "dra-conformance image build"), fresh=args.rebuild
        )
    if args.output:
        built = image_builder.copy_to(built, args.output)
    # The whole command's time: for Sonobuoy, its Go build (or cache lookup) too.
    print("\n".join(dataclasses.replace(built, seconds=time.monotonic() - started).lines()))
    return EXIT_OK


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _announce_host_paths(profile: DriverProfile) -> None:
    line = host_paths_line(profile.source, profile.host_paths)
    if line is not None:
        _stderr(line)


def cluster_config(args: argparse.Namespace) -> SuiteConfig:
    """The settings of a `cluster` command, its deadlines included."""
    return SuiteConfig(
        nodes=args.nodes,
        state_dir=args.state_dir,
        cache_dir=args.cache_dir,
        metrics=args.metrics,
        profile=args.profile,
        real_node=args.real_node,
        real_nodes=getattr(args, "real_nodes", None) or SuiteConfig.real_nodes,
        replace_driver=args.replace_driver,
        timeouts=Timeouts().override(
            **{name: value for name in CLUSTER_DEADLINES if (value := getattr(args, f"timeout_{name}")) is not None}
        ),
    )


def _cluster(args: argparse.Namespace) -> int:
    if args.profile:
        _announce_host_paths(load_profile(args.profile))  # a bad profile is one line before anything starts
    backend = make_backend(cluster_config(args))
    if args.action == "up":
        started = backend.start()
        print(f"local cluster running: {started.server}, nodes {', '.join(started.nodes + started.real_nodes)}")
        print(f"kubeconfig: {started.kubeconfig}")
        print(f"logs: {started.log_dir}")
        return EXIT_OK
    if args.action == "down":
        was_running = backend.info() is not None
        backend.stop()
        print("local cluster stopped" if was_running else "local cluster was not running")
        return EXIT_OK
    info = backend.info()
    if info is None:
        print("local cluster is not running", file=sys.stderr)
        return EXIT_FAILED
    if args.action == "kubeconfig":
        print(info.kubeconfig)
    else:
        print(f"running: {info.server}; nodes: {', '.join(info.nodes)}; state: {info.details['state_dir']}")
        for key, value in sorted(info.details.items()):
            if key.startswith("pid."):
                print(f"  {key[4:]}: pid {value}")
        startup = {key[8:]: value for key, value in info.details.items() if key.startswith("startup.")}
        if startup:
            print("  start-up seconds: " + ", ".join(f"{phase} {seconds}" for phase, seconds in startup.items()))
    return EXIT_OK


# pytest's own options that take their value as the next argument (`-k expr`), next to the plugin's.
PYTEST_VALUE_OPTIONS = frozenset(
    {"-k", "-m", "-n", "-p", "-o", "-c", "-W", "--junitxml", "--maxfail", "--deselect", "--ignore", "--rootdir"}
    | {"--basetemp", "--tb", "--timeout", "--dist", "--override-ini", "--confcutdir", "--numprocesses"}
)


# The plugin's options whose value is a path (tests/unit/test_cli.py keeps this in step with the plugin): given as
# `--dra-reports-dir DIR`, DIR is a value, not a test path.
PLUGIN_PATH_OPTIONS = frozenset(
    {"--dra-kubeconfig", "--dra-state-dir", "--dra-cache-dir", "--dra-profile", "--dra-catalog", "--dra-audit-log"}
    | {"--dra-reports-dir", "--dra-rbac-matrix", "--dra-rollback-state", "--dra-phases-file"}
    | {"--dra-read-allowlist"}
)


def chosen_targets(pytest_args: Sequence[str]) -> list[str]:
    """The test paths or node ids among `pytest_args`, leaving out option values (`--dra-state-dir DIR`)."""
    takes_value = PLUGIN_PATH_OPTIONS | PYTEST_VALUE_OPTIONS
    chosen = []
    for index, arg in enumerate(pytest_args):
        previous = pytest_args[index - 1] if index else ""
        if previous in takes_value or arg.startswith("-"):
            continue
        if "::" in arg or Path(arg).exists():
            chosen.append(arg)
    return chosen


# What the suites need from pytest, whatever ini file (if any) the run's directory holds: metrics tests that share
# cluster-wide APIServices stay on one worker (loadgroup), and each test body has a deadline. A crashed worker is
# not replaced: its check is an error and xdist ends the run early, which the summary reports as interrupted (a
# replacement worker under loadgroup left a run hanging with no CPU use for 17 minutes in the fault matrix).
# This CLI owns them: an installed wheel's run has no ini file of ours. The checkout's pyproject.toml repeats the
# ones a direct `pytest tests suites` there needs; the plugin cannot own them, since ini values (`-o`) count only
# when given on the command line or in the ini file, before any plugin hook could add them.
SUITE_PYTEST_OPTIONS = (
    "--dist=loadgroup",
    "--max-worker-restart=0",
    "--strict-markers",
    "-ra",
    "-o",
    "xfail_strict=true",
    "-o",
    "timeout=300",
    "-o",
    "timeout_func_only=true",
    # This CLI has imported the engine before pytest starts, so pytest cannot rewrite the asserts of the plugin's
    # package and would warn so on every run; the suites' own modules are still rewritten.
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
)


def _reports_root() -> Path:
    # Reports go to <rootdir>/reports: the checkout's in a checkout, else the directory the command runs in.
    return Path.cwd() if paths.installed() else paths.CHECKOUT


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _report(args: argparse.Namespace) -> int:
    if args.fleet:
        if args.run or args.serve:
            raise UsageError("report --fleet takes its runs as DIR_OR_TARBALL...; leave out RUN and --serve")
        reports = args.reports_dir or _reports_root() / "reports"
        history = args.history or str(reports / DEFAULT_HISTORY)
        now = datetime.now(UTC)
        return fleet_command(
            args.fleet, args.stale_after, args.output, now, print, _to_stderr, history=history, since=args.since
        )
    if args.run is None:
        raise UsageError("report needs RUN (a run id under reports/, or a run's directory), or --fleet")
    reports = args.reports_dir or _reports_root() / "reports"
    report_command(args.run, reports, args.cache_dir or default_cache_dir(), args.port if args.serve else None, print)
    return EXIT_OK


def _verdict(args: argparse.Namespace) -> int:
    """`dra-conformance verdict RUN`: the run's verdict decided again from its findings, and whether it agrees."""
    reports = args.reports_dir or _reports_root() / "reports"
    run_dir = next((c for c in (Path(args.run), reports / args.run) if c.is_dir()), None)
    if run_dir is None:
        raise UsageError(f"verdict: no run {args.run!r}: neither a directory nor a run id under {reports}")
    try:
        replayed = replay_verdict(run_dir)
    except FindingsError as error:
        print(f"dra-conformance verdict: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"verdict: {replayed.verdict} (decided again from {run_dir / FINDINGS_JSON})")
    print("\n".join(f"  {reason}" for reason in replayed.reasons))
    if not replayed.agrees:
        print(
            f"dra-conformance verdict: the findings decide {str(replayed.verdict)!r}, but the run recorded "
            f"{replayed.recorded!r} ({replayed.recorded_in})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"  the same verdict the run recorded ({replayed.recorded_in})")
    return EXIT_OK


def one_line_usage_error(text: str, command: str = "run") -> str:
    """The usage error pytest gives for a bad option (usage text, error, inifile and rootdir lines) as one line.

    `command` is the CLI command whose pytest run it was (`run`, `explore`), which the line names.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line.split(" error: ", 1)[1] for line in lines if " error: " in line), None)
    if error is None:
        return " ".join(lines)
    own = "the run's" if command == "run" else "its"
    return (
        f"dra-conformance {command}: {error} ({own} own flags: dra-conformance {command} --help; the rest goes to "
        "pytest)"
    )


def _one_line_usage_errors(command: str = "run") -> object:
    """A pytest plugin that shortens a usage error raised while pytest parses the command line to one line."""
    import pytest

    class OneLineUsageErrors:
        @pytest.hookimpl(wrapper=True)
        def pytest_cmdline_parse(self) -> Any:
            try:
                return (yield)
            except pytest.UsageError as error:
                raise pytest.UsageError(one_line_usage_error(str(error), command)) from None

    return OneLineUsageErrors()


def _pytest_then_html(pytest_args: list[str], html: bool, command: str = "run") -> int:
    """One pytest run, then (`html`) its Allure HTML; the exit code is pytest's, whatever the rendering does."""
    import pytest

    with stdout_reader_may_leave(sys):
        if not html:
            return int(pytest.main(pytest_args, plugins=[_one_line_usage_errors(command)]))
        renderer = RunRenderer(default_cache_dir())
        code = int(pytest.main(pytest_args, plugins=[_one_line_usage_errors(command), renderer]))
    renderer.render_now(lambda line: print(line, file=sys.stderr))
    return code


def refuse_former_options(pytest_args: list[str]) -> None:
    """Raise UsageError for an option given by a former spelling (`settings.former_spelling`), naming the new one."""
    run_flags = frozenset(setting.flag for setting in settings.shared_by("run"))
    for arg in pytest_args:
        if (line := settings.former_spelling(arg, run_flags)) is not None:
            raise UsageError(line)


def parse_command_line(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The CLI's own arguments, and those it hands to pytest (`run`, `explore`) or to the run in a pod (Sonobuoy).

    Exits (SystemExit) on an unknown flag of a command that hands nothing on; raises UsageError for a former
    spelling.
    """
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in PASSES_ON:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in ("run", "explore"):
        refuse_former_options(rest)
    return args, rest


# The commands whose arguments they do not know go to pytest (run, explore) or to `dra-conformance run` in a pod.
PASSES_ON = ("run", "explore", "sonobuoy", "sonobuoy-plugin", "sonobuoy-entry")


def _add_explore_command(commands: Any) -> None:
    explore = commands.add_parser(
        "explore",
        help="explore the driver's kubelet contract with random operation sequences (suites/explore): the shrunk "
        "failing sequence and its seed, or what was covered; extra arguments go to pytest",
    )
    add_shared(explore, "explore")
    explore.add_argument("--replace-driver", action="store_true", help=REPLACE_DRIVER_HELP)
    seeds = explore.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=_seed, help="the seed to explore from (default: derived from the run's id)")
    seeds.add_argument(
        "--replay",
        type=_seed,
        metavar="SEED",
        help="run a reported seed again: the same operations in the same order, with no time budget (give the "
        "reported --max-examples and --max-steps too)",
    )
    explore.add_argument(
        "--max-steps", type=_positive_int, default=explore_runner.DEFAULT_MAX_STEPS, help="operations per example"
    )
    explore.add_argument(
        "--max-examples", type=_positive_int, default=explore_runner.DEFAULT_MAX_EXAMPLES, help="examples at most"
    )
    explore.add_argument(
        "--budget-seconds",
        type=_positive_seconds,
        default=explore_runner.DEFAULT_SECONDS,
        help=f"seconds of drawing new examples (default {explore_runner.DEFAULT_SECONDS:g})",
    )
    explore.add_argument(
        "--shrink-seconds",
        type=_positive_seconds,
        default=explore_runner.DEFAULT_SHRINK_SECONDS,
        help=f"seconds of shrinking after the first finding (default {explore_runner.DEFAULT_SHRINK_SECONDS:g})",
    )


# Beyond its budget, an exploration sets up (a set-aside node, a DeviceClass), finishes the step under way (a driver
# start waits up to driver_ready) and cleans up.
EXPLORE_SLACK = 300.0


def _seed(text: str) -> int:
    return _whole_number(text, 0)


def _explore(args: argparse.Namespace, pytest_args: list[str]) -> int:
    """`explore`: the explorer's suite alone, in the run's own process, then the exploration as it was recorded."""
    reports = _reports_root() / "reports" / f"explore-{time.strftime('%Y%m%d-%H%M%S')}"
    seed = args.replay if args.replay is not None else args.seed
    options = [
        f"--dra-explore-seconds={0 if args.replay is not None else args.budget_seconds:g}",
        f"--dra-explore-shrink-seconds={args.shrink_seconds:g}",
        f"--dra-explore-max-examples={args.max_examples}",
        f"--dra-explore-max-steps={args.max_steps}",
        *([f"--dra-explore-seed={seed}"] if seed is not None else []),
        f"--dra-reports-dir={reports}",
        # The check's deadline covers its budget (a replay has none but its example count): pytest's 300 s is the
        # default run's.
        "-o",
        f"timeout={0 if args.replay is not None else args.budget_seconds + args.shrink_seconds + EXPLORE_SLACK:g}",
    ]
    shared = {
        (dest := setting.name.replace("-", "_")): getattr(args, dest, None) for setting in settings.shared_by("run")
    }
    run = argparse.Namespace(
        **shared,
        real_node=False,
        real_node_auto=False,
        replace_driver=args.replace_driver,
        no_html=True,
        workers=0,
        allow_partial=False,
        repeat=1,
        usage_command="explore",
    )
    code = _run(run, [*options, *pytest_args, str(paths.suites_dir() / "explore")])
    for record in (r for run_dir in sorted(reports.glob("*/")) for r in read_records(run_dir, "explore")):
        print("\n".join(record.get("lines", [])))
    return code


def _run(args: argparse.Namespace, pytest_args: list[str]) -> int:
    refuse_former_options(pytest_args)
    if args.profile:
        _announce_host_paths(load_profile(args.profile))  # a bad profile is one line before pytest starts
        args.profile = args.profile.resolve()
    root = _reports_root()
    if args.cluster == "existing" and args.kubeconfig is None:
        # $KUBECONFIG, as kubectl reads it; else, in a pod (the suite's image), the pod's own cluster as its
        # ServiceAccount.
        args.kubeconfig = settings.kubeconfig_from(os.environ) or in_cluster_kubeconfig(
            os.environ, root / "reports" / "clusters" / "in-cluster.kubeconfig"
        )
    # validate early
    make_backend(SuiteConfig(backend=args.cluster, kubeconfig=args.kubeconfig, context=args.context, nodes=args.nodes))
    # The plugin's options are this CLI's flags with the `--dra-` prefix (one table, dra_conformance.settings);
    # `--dra-cluster`, always given, also opts the run in to DRA conformance before pytest collects (see
    # dra_conformance.plugin.opt_in).
    options = [
        *shared_plugin_options(args),
        "--rootdir",
        str(root),
        "-n",
        str(args.workers),
        *SUITE_PYTEST_OPTIONS,
    ]
    real_node, why = real_node_wanted(real_node_choice(args), args.cluster)
    if real_node:
        if args.real_node_auto:
            install_real_node_packages()  # the machine allows it: what the node needs comes with the run
        options.append("--dra-real-node")
    elif why:
        options.append(f"--dra-real-node-absent={why}")
    if args.allow_partial:
        options.append("--dra-allow-partial")
    if args.replace_driver:
        options.append("--dra-replace-driver")
    targets = [] if chosen_targets(pytest_args) else [str(paths.suites_dir())]
    if args.repeat == 1:
        # `explore` runs pytest through here too: its usage errors name it (`usage_command`).
        command = getattr(args, "usage_command", "run")
        return _pytest_then_html([*options, *pytest_args, *targets], html=not args.no_html, command=command)
    if args.reports_dir or any(arg.startswith("--dra-reports-dir") for arg in pytest_args):
        raise UsageError("--repeat writes each run under reports/repeat-<time>/run-<n>/; leave out --reports-dir")
    batch = root / "reports" / f"repeat-{time.strftime('%Y%m%d-%H%M%S')}"
    codes: list[int] = []
    summaries: list[Path] = []
    for index in range(args.repeat):
        # Every run but the last keeps the cluster for the next; this process owns it throughout (pytest runs in
        # it), so the last run stops it unless the user keeps it. (--dra-keep-cluster would disown it: it leaked.)
        keep = ["--dra-keep-cluster-for-next-run"] if index < args.repeat - 1 else []
        reports = batch / f"run-{index + 1:03d}"
        one_run = [*options, *keep, f"--dra-reports-dir={reports}", *pytest_args, *targets]
        codes.append(_pytest_then_html(one_run, html=not args.no_html))
        summaries.append(next(iter(sorted(reports.glob("*/summary.json"))), reports / "no-summary.json"))
    record = flake_record(read_outcomes(summaries))
    write_flake_record(record, batch)
    print("\n".join(render_flakes(record)) + f"\nflake record: {batch / FLAKE_JSON}")
    failed = record["flaky"] or record["failing"] or any(codes)
    return EXIT_FAILED if failed else EXIT_OK


def shared_plugin_options(args: argparse.Namespace) -> list[str]:
    """`run`'s shared settings as the plugin's options: `--state-dir DIR` is `--dra-state-dir=DIR`.

    The cluster is always named (it opts the run in and asks for the preflight); any other setting only when given
    and not its default, which the plugin applies alike.
    """
    given = ((setting, getattr(args, setting.name.replace("-", "_"))) for setting in settings.shared_by("run"))
    return [
        f"{setting.plugin_option}={value}"
        for setting, value in given
        if setting.name == "cluster" or (value is not None and str(value) != setting.default)
    ]


def not_this_users(error: PermissionError) -> str:
    """The line for a file this user may not open (another user's state or cache directory): whose, the way on."""
    where = Path(error.filename) if error.filename else None
    owner = ""
    for candidate in (where, *where.parents) if where is not None else ():
        with contextlib.suppress(OSError):
            owner = f"; owned by uid {candidate.stat().st_uid}"
            break
    return (
        f"{where or 'a file'}: {error.strerror} (running as uid {os.geteuid()}{owner}): run as its owner, or give "
        "this user a directory of its own (--state-dir, --cache-dir)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every expected failure is one line on stderr and a non-zero exit code."""
    try:
        args, rest = parse_command_line(argv)
        if args.command == "build":
            return _build(args)
        if args.command == "cluster":
            return _cluster(args)
        if args.command == "report":
            return _report(args)
        if args.command == "verdict":
            return _verdict(args)
        if args.command == "explore":
            return _explore(args, rest)
        if args.command == "slices":
            return _slices(args)
        if args.command == "obligations":
            return _obligations(args)
        if args.command == "profile":
            return _profile(args)
        if args.command == "sonobuoy-plugin":
            return _sonobuoy_plugin(args, rest)
        if args.command == "sonobuoy-entry":
            return _sonobuoy_entry(args, rest)
        if args.command == "sonobuoy":
            return _sonobuoy(args, rest)
        if args.command == "image":
            return _image(args)
        return _run(args, rest)
    except BindingsError as error:
        print(f"dra-conformance: kubelet plugin API bindings: {error}", file=sys.stderr)
        return EXIT_FAILED
    except BuildError as error:
        print(f"dra-conformance: {error}\n{error.log_tail}", file=sys.stderr)
        return EXIT_FAILED
    except ConformanceError as error:
        print(f"dra-conformance: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, UsageError) else EXIT_FAILED
    except PermissionError as error:  # a state or cache directory of another user (its lock, its files)
        print(f"dra-conformance: {not_this_users(error)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dra-conformance: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

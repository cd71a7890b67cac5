"""`dra-conformance sonobuoy run`: both parts of the in-cluster run through the pinned Sonobuoy, then one verdict.

What a platform team would otherwise do by hand, in order:

1. the profile packaged as the pods mount it, with the files it names (`sonobuoy/package.py`);
2. the nodes of the node part: those the driver publishes node-local ResourceSlices for (or `--node-label`);
3. where the cluster is ours (the kubeconfig is the admin kubeconfig of a running local cluster of this machine,
   with its real node): the suite's and Sonobuoy's images built by our own code and imported into the real node,
   and every pod on the host's network (pods there reach the API server only through it, see `on_host.py`);
4. the plugins' RBAC applied, with what the node part needs beyond it: the one read Sonobuoy's aggregator needs
   beyond `namespaceAdmin` to run a DaemonSet plugin (`plugin.aggregator_node_reader`: list nodes), and the
   rolling-update check's read and patch of the driver's DaemonSet (`plugin.driver_rollout_role`, in the driver's
   namespace). The RBAC creates Sonobuoy's namespace, which is why `sonobuoy run` would refuse with its
   `existingnamespace` preflight check: this path runs no preflight, and refuses itself when a Sonobuoy run is
   still in the namespace;
5. `sonobuoy gen` with both plugins (the cluster part, then the node part: Sonobuoy's plugin `order`), the
   aggregator moved to the host on the local cluster, the manifest applied, `sonobuoy wait`, `sonobuoy retrieve`;
6. the merged verdict printed and written beside the tarball (`dra-conformance-verdict/summary.json`, which the
   fleet report reads as the cluster's run), and the run's objects deleted (`sonobuoy delete --wait`, the plugins'
   RBAC).

The Sonobuoy binary is the pinned one our build makes from its Go module (`backends.registry.build_sonobuoy`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from dra_conformance import paths, versions
from dra_conformance.backends.registry import build_sonobuoy, install_host_packages, make_backend, socket_relays
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import BackendError, UsageError
from dra_conformance.image import builder as image_builder
from dra_conformance.image import recipes as image_recipes
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.client import client_from_kubeconfig, status_message
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.sonobuoy import on_host, plugin, protocol, retrieved
from dra_conformance.sonobuoy.package import pod_profile
from dra_conformance.sonobuoy.part import Part
from dra_conformance.verdict import Verdict
from dra_wire.cache import default_cache_dir

# Sonobuoy's own default plugin timeout is 6 hours; a whole run of the suite takes well under one on a busy
# two-core machine. `sonobuoy wait` takes whole minutes.
DEFAULT_WAIT_MINUTES = 360
# `sonobuoy gen`, `retrieve` and `delete --wait` answer within seconds to a minute (a namespace's deletion).
COMMAND_DEADLINE = 300.0
# The server answers a list or a delete in milliseconds; 10 s covers a slow VPN to a staging cluster.
REQUEST_TIMEOUT = 10.0
FIELD_MANAGER = "dra-conformance-sonobuoy"
EXIT_CERTIFIED = 0
EXIT_NOT_CERTIFIED = 1
# Kept of a failed Sonobuoy command's output for its one-line error.
ERROR_TAIL = 300


@dataclass(frozen=True)
class RunSettings:
    """What `dra-conformance sonobuoy run` is given."""

    profile: Path
    cluster_name: str
    kubeconfig: Path
    # Where `sonobuoy retrieve` writes the tarball, and the merged verdict goes beside it.
    output: Path
    namespace: str = protocol.DEFAULT_NAMESPACE
    # The suite's image (None: the one our build makes, imported where the cluster is ours; else the default).
    image: str | None = None
    # Sonobuoy's image (None: ours where the cluster is ours, else Sonobuoy's default).
    sonobuoy_image: str | None = None
    node_label: str | None = None
    kubelet_root: str | None = None
    wait_minutes: int = DEFAULT_WAIT_MINUTES
    run_args: tuple[str, ...] = field(default=())
    cache_dir: Path | None = None


@runtime_checkable
class _ImportsImages(Protocol):
    def import_images(self, archives: tuple[Path, ...]) -> None: ...


@dataclass(frozen=True)
class LocalCluster:
    """A running local cluster of this machine, by its admin kubeconfig: where images are imported into."""

    info: ClusterInfo
    backend: _ImportsImages


def kubeconfig_path(given: Path | None, environ: dict[str, str] | os._Environ[str]) -> Path:
    """`--kubeconfig`, else the first file of $KUBECONFIG, else ~/.kube/config (what kubectl and Sonobuoy read)."""
    if given is not None:
        return given
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(listed[0]) if listed else Path.home() / ".kube" / "config"


def local_cluster(kubeconfig: Path) -> LocalCluster | None:
    """The local cluster whose admin kubeconfig `kubeconfig` is, where one runs on this machine; else None."""
    state = kubeconfig.resolve().parent
    if not (state / "cluster.json").is_file():
        return None
    backend = make_backend(SuiteConfig(backend="local", state_dir=state))
    info = backend.info()
    if info is None or info.kubeconfig.resolve() != kubeconfig.resolve() or not isinstance(backend, _ImportsImages):
        return None
    if not info.real_nodes:
        raise UsageError(
            f"the local cluster in {state} has no real node: the node part runs on the nodes of the driver, which "
            "pods run only on a real node (dra-conformance cluster up --real-node)"
        )
    return LocalCluster(info, backend)


def driver_nodes(api_client: client.ApiClient, driver: str) -> tuple[str, ...]:
    """The nodes `driver` publishes node-local ResourceSlices for."""
    group, version = RESOURCE_API.split("/")
    try:
        slices = client.CustomObjectsApi(api_client).list_cluster_custom_object(
            group, version, "resourceslices", field_selector=f"spec.driver={driver}", _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as error:
        raise BackendError(f"list the ResourceSlices of {driver}: {status_message(error)}") from None
    return tuple(sorted({str(s["spec"]["nodeName"]) for s in slices["items"] if s["spec"].get("nodeName")}))


def refuse_a_run_in_progress(api_client: client.ApiClient, namespace: str) -> None:
    """A Sonobuoy aggregator still in `namespace` is a run this one must not overwrite (what the preflight checks)."""
    key, value = on_host.AGGREGATOR_LABEL
    try:
        pods = client.CoreV1Api(api_client).list_namespaced_pod(
            namespace, label_selector=f"{key}={value}", _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as error:
        if error.status == 404:
            return
        raise BackendError(f"look for a Sonobuoy run in namespace {namespace}: {status_message(error)}") from None
    if pods.items:
        raise UsageError(
            f"a Sonobuoy run is still in namespace {namespace} (pod {pods.items[0].metadata.name}): retrieve it, then "
            f"`sonobuoy delete --namespace {namespace} --wait`, or give another --namespace"
        )


def apply(api_client: client.ApiClient, documents: list[dict[str, Any]]) -> None:
    """Server-side apply each document (namespaces first) through API discovery."""
    dynamic = DynamicClient(api_client)
    ordered = [d for d in documents if d.get("kind") == "Namespace"] + [
        d for d in documents if d.get("kind") != "Namespace"
    ]
    for document in ordered:
        name = f"{document['kind']} {document['metadata'].get('namespace', '')}/{document['metadata']['name']}"
        try:
            resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
            namespace = document["metadata"].get("namespace", "default") if resource.namespaced else None
            resource.server_side_apply(
                body=document, namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True
            )
        except ResourceNotFoundError:
            raise BackendError(f"apply {name}: the API server does not serve {document['apiVersion']}") from None
        except ApiException as error:
            raise BackendError(f"apply {name}: {status_message(error)}") from None


def free_port() -> int:
    """A TCP port no process on this machine listens on now (the aggregator binds it on the host's network)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def source_date_epoch(environ: dict[str, str] | os._Environ[str]) -> int:
    """The images' time, as `dra-conformance image build` takes it."""
    text = environ.get("SOURCE_DATE_EPOCH", str(image_recipes.DEFAULT_SOURCE_DATE_EPOCH))
    if not text.isdigit():
        raise UsageError(f"SOURCE_DATE_EPOCH={text!r} is not a whole number of seconds")
    return int(text)


def build_suite_image(cache_dir: Path, echo: Callable[[str], None]) -> image_builder.Built:
    """The suite's image archive, as `dra-conformance image build --image suite` makes it."""
    recipe = image_recipes.RECIPES["suite"]
    images = image_builder.ImageBuilder(
        image_builder.checkout_root(paths.PACKAGE_DIR),
        cache_dir,
        echo=echo,
        source_date_epoch=source_date_epoch(os.environ),
        prebuilt=socket_relays(SuiteConfig(cache_dir=cache_dir), recipe.relay_architectures),
    )
    return images.build(recipe, lambda packages: install_host_packages(packages, "dra-conformance sonobuoy run"))


def build_sonobuoy_image(cache_dir: Path) -> image_builder.Built:
    """Sonobuoy's image archive, as `dra-conformance image build --image sonobuoy` makes it."""
    binary = build_sonobuoy(SuiteConfig(cache_dir=cache_dir))
    return image_builder.binary_image(
        image_builder.SONOBUOY, binary, versions.SONOBUOY, cache_dir, source_date_epoch(os.environ)
    )


class Sonobuoy:
    """The pinned Sonobuoy binary, run against one cluster and namespace."""

    def __init__(self, binary: Path, kubeconfig: Path, namespace: str) -> None:
        """Run `binary` with `kubeconfig` in `namespace`."""
        self.binary, self.kubeconfig, self.namespace = binary, kubeconfig, namespace

    def __call__(self, command: str, *args: str, timeout: float = COMMAND_DEADLINE) -> str:
        """`sonobuoy COMMAND --kubeconfig K --namespace NS ARGS`'s stdout; a failure is one line naming it."""
        argv = [str(self.binary), command, "--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(f"sonobuoy {command}: no answer within {timeout:g} s") from None
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split())[-ERROR_TAIL:]
            raise BackendError(f"sonobuoy {command}: exit {done.returncode}: {said or 'no output'}")
        return done.stdout


def plugin_settings(
    settings: RunSettings, profile: Path, image: str, nodes: tuple[str, ...], local: LocalCluster | None
) -> list[plugin.PluginSettings]:
    """The cluster part's and the node part's plugin settings (on the local cluster: on the host's network)."""
    server = local.info.server if local is not None else None
    arguments = (profile, settings.cluster_name, image, settings.namespace, settings.run_args, server)
    real_nodes = local.info.real_nodes if local is not None else ()
    return [
        plugin.settings_from(*arguments, real_nodes, part=Part.CLUSTER),
        plugin.settings_from(
            *arguments, nodes, part=Part.NODE, kubelet_root=settings.kubelet_root, node_label=settings.node_label
        ),
    ]


def _echo(line: str) -> None:
    print(f"sonobuoy run: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _staging() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dra-sonobuoy-") as directory:
        yield Path(directory)


def run(settings: RunSettings, echo: Callable[[str], None] = _echo, out: Callable[[str], None] = print) -> int:
    """Run both parts through Sonobuoy, print the merged verdict; 0 when certified, else 1."""
    if not settings.cluster_name.strip() or "\n" in settings.cluster_name:
        raise UsageError("--cluster-name needs a name on one line: the fleet report tells clusters apart by it")
    loaded = load_profile(settings.profile)  # a bad profile is one line before anything is touched
    driver, driver_namespace = loaded.driver, loaded.identity.service_account.namespace
    with _staging() as staging, client_from_kubeconfig(settings.kubeconfig) as api_client:
        profile, changes = pod_profile(settings.profile, staging / "profile")
        for change in changes:
            echo(f"profile: {change}")
        local = local_cluster(settings.kubeconfig)
        refuse_a_run_in_progress(api_client, settings.namespace)
        nodes = driver_nodes(api_client, driver) if settings.node_label is None else ()
        if local is not None:
            nodes = tuple(n for n in nodes if n in local.info.real_nodes)
        if settings.node_label is None and not nodes:
            raise UsageError(
                f"no node publishes ResourceSlices of {driver} (is the driver installed and running?); give "
                "--node-label KEY=VALUE to choose the driver's nodes"
            )
        echo(f"node part on {', '.join(nodes) if nodes else f'the nodes labelled {settings.node_label}'}")
        binary = build_sonobuoy(SuiteConfig(cache_dir=settings.cache_dir))
        image, sonobuoy_image = settings.image or plugin.DEFAULT_IMAGE, settings.sonobuoy_image
        if local is not None:
            # Our images, built by our own code (a warm build takes a second), unless an image was given.
            cache_dir = settings.cache_dir or default_cache_dir()
            built = [
                *([build_suite_image(cache_dir, echo)] if settings.image is None else []),
                *([build_sonobuoy_image(cache_dir)] if settings.sonobuoy_image is None else []),
            ]
            names = {one.kind: one.name for one in built}
            image, sonobuoy_image = names.get("suite", image), names.get("sonobuoy", sonobuoy_image)
            if built:
                echo(f"import {' and '.join(names.values())} into {', '.join(local.info.real_nodes)}")
                local.backend.import_images(tuple(one.archive for one in built))
        files = []
        for one in plugin_settings(settings, profile, image, nodes, local):
            path = staging / f"{one.plugin_name}.yaml"
            path.write_text(plugin.render_plugin(one))
            files.append(path)
        sonobuoy = Sonobuoy(binary, settings.kubeconfig, settings.namespace)
        generate = [
            *(arg for path in files for arg in ("--plugin", str(path))),
            # Sonobuoy's default, clusterAdmin, makes its aggregator a reader of every namespace's claims, which the
            # read-exposure check reports as a reader beyond the allowlist.
            "--aggregator-permissions",
            "namespaceAdmin",
            "--kubernetes-version",
            "ignore",
            "--timeout",
            str(settings.wait_minutes * 60),
        ]
        if sonobuoy_image is not None:
            generate += ["--sonobuoy-image", sonobuoy_image, "--image-pull-policy", "IfNotPresent"]
        documents = [d for d in yaml.safe_load_all(sonobuoy("gen", *generate)) if d]
        if local is not None:
            documents = on_host.aggregator_on_host(
                documents, local.info.server, local.info.real_nodes, free_port(), free_port()
            )
        echo(f"apply the plugins' RBAC and Sonobuoy's manifest in namespace {settings.namespace}")
        apply(
            api_client,
            [
                *plugin.rbac_documents(settings.namespace),
                *plugin.aggregator_node_reader(settings.namespace),
                *plugin.driver_rollout_role(driver_namespace, settings.namespace),
            ],
        )
        try:
            apply(api_client, documents)
            echo(f"wait for both parts (at most {settings.wait_minutes} min)")
            try:
                sonobuoy(
                    "wait",
                    f"--wait={settings.wait_minutes}",
                    "--wait-output=silent",
                    timeout=60.0 * settings.wait_minutes + COMMAND_DEADLINE,
                )
            except BackendError as error:
                # A run whose aggregator ended "failed" still has its results: the parts say why.
                echo(f"{error}; retrieving what the run has")
            settings.output.mkdir(parents=True, exist_ok=True)
            tarball = Path(sonobuoy("retrieve", str(settings.output)).strip().splitlines()[-1])
        except BaseException:
            echo(
                f"the run stays in namespace {settings.namespace} for a look (sonobuoy status, sonobuoy logs); "
                f"`sonobuoy delete --namespace {settings.namespace} --wait` removes it"
            )
            raise
        echo(f"retrieved {tarball}; delete the run's objects")
        delete_run(sonobuoy, api_client, driver_namespace)
    return report(tarball, settings.output / retrieved.VERDICT_DIR, out)


def delete_run(sonobuoy: Sonobuoy, api_client: client.ApiClient, driver_namespace: str) -> None:
    """Sonobuoy's namespace and its cluster-wide objects (`sonobuoy delete --wait`), then the plugins' RBAC."""
    sonobuoy("delete", "--wait")
    rbac = client.RbacAuthorizationV1Api(api_client)
    for delete_in in (rbac.delete_namespaced_role_binding, rbac.delete_namespaced_role):
        with contextlib.suppress(ApiException):  # already gone: nothing to do
            delete_in(plugin.DRIVER_ROLLOUT_ROLE, driver_namespace, _request_timeout=REQUEST_TIMEOUT)
    for name in (plugin.CLUSTER_ROLE, plugin.AGGREGATOR_NODE_READER):
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(ApiException):  # already gone: nothing to do
                delete(name, _request_timeout=REQUEST_TIMEOUT)


def report(tarball: Path, verdict_dir: Path | None, out: Callable[[str], None] = print) -> int:
    """Print the merged verdict of `tarball` (and write it to `verdict_dir`); 0 when certified, else 1."""
    merged, parts = retrieved.merged_verdict(tarball)
    for line in retrieved.report_lines(merged.summary if merged is not None else None, parts, tarball):
        out(line)
    if merged is None:
        return EXIT_NOT_CERTIFIED
    if verdict_dir is not None:
        out(f"merged summary: {retrieved.write_verdict(merged, verdict_dir)}")
    certified = merged.summary["verdict"] in (Verdict.CERTIFIED, Verdict.CERTIFIED_WITH_ADVISORIES)
    return EXIT_CERTIFIED if certified else EXIT_NOT_CERTIFIED

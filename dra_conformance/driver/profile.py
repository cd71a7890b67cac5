"""Driver profiles: one YAML file per DRA driver, written by its vendor, validated against profile.schema.json.

A profile says how the local backend runs the driver (`run`; absent when it is installed in the cluster), who the
driver is (`identity`), what it publishes (`deviceClasses`, `devices`), what it claims to do (`capabilities`), how
the suite makes one of its devices unhealthy and healthy again (`health`, hooks with placeholders of their own: see
HOOK_PLACEHOLDERS), how much more time it needs (`timeouts`) and whether defensive findings fail (`strictness`).
The JSON Schema ships next to this module and documents every field for vendors; what a schema cannot say (RBAC
files exist, selectors only on classes the suite creates, unique class names, no duplicate YAML keys, an install's
kustomize overlay exists, its patches' shapes fit their types, where hooks reach) is checked here.

Every problem is a ProfileError of one line, `<file>:<line>: <key path>: <problem>`, the line taken from the YAML
node marks of the offending key or value. Strings marked as templates in the schema may hold placeholders
(`{node}`, `{bin:dra_test_driver}`, ...; see PLACEHOLDERS); `render` fills them in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dra_conformance.driver import bounded_yaml, confinement, manifest_files
from dra_conformance.errors import ProfileError, UsageError
from dra_conformance.schema_errors import TOP_LEVEL, KeyPath, format_key_path, schema_problem
from dra_conformance.timeouts import Timeouts

SCHEMA_FILE = "profile.schema.json"
# The schema's `format` of strings that may hold placeholders.
TEMPLATE_FORMAT = "placeholder-template"
# The placeholders a template may use; the schema's `template` definition says what each one stands for.
PLACEHOLDERS = frozenset(
    {
        "driver",
        "node",
        "kubeconfig",
        "registrar_dir",
        "plugins_dir",
        "cdi_dir",
        "socket_path",
        "data_dir",
        "kubelet_root",
        "python",
        "devices",
    }
)
# `{bin:<component>}`: the path of a pinned binary the engine builds, by its builder's component name.
BINARY_PLACEHOLDER = "bin"
# The format of the strings of `health` hooks, which run where the suite runs, for one device of one node.
HOOK_TEMPLATE_FORMAT = "hook-template"
# The placeholders a hook may use; the schema's `hookTemplate` definition says what each one stands for.
HOOK_PLACEHOLDERS = frozenset({"driver", "node", "device", "pool", "plugins_dir", "kubelet_root", "python"})
# The binaries a hook may name (`{bin:<component>}`): those every local cluster builds and records.
HOOK_BINARIES = frozenset({"reference_driver_go"})
# `{name}` or `{name:argument}`; other braces (CEL map literals, JSON) are not placeholders.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z0-9_.-]*))?\}")
_COMPONENT = re.compile(r"[a-z][a-z0-9_]*")
# Hex digits of the profile's sha256 shown in reports.
HASH_LENGTH = 12


class Capability(StrEnum):
    """What a driver may claim to do; the values are the keys of the profile's `capabilities`."""

    STATUS_DEVICES = "statusDevices"
    NETWORK_DATA = "networkData"
    HEALTH_STREAM = "healthStream"
    ADMIN_ACCESS = "adminAccess"
    PARTITIONABLE_DEVICES = "partitionableDevices"
    CONSUMABLE_CAPACITY = "consumableCapacity"
    BINDING_CONDITIONS = "bindingConditions"
    EXTENDED_RESOURCE_MAPPING = "extendedResourceMapping"
    ROLLING_UPDATE = "rollingUpdate"
    REFERENCE_FAULTS = "referenceFaults"
    FAULT_SWITCHES = "faultSwitches"


class Strictness(StrEnum):
    """Whether findings beyond the Kubernetes contract (defensive checks) are advisories or failures."""

    CONTRACT = "contract"
    STRICT = "strict"


class NodeScope(StrEnum):
    """Where the driver runs: on every node the backend has (fake ones too), or on real nodes only."""

    ALL = "all"
    REAL_ONLY = "realOnly"


class AttributeType(StrEnum):
    """The type of a device attribute, as a ResourceSlice writes its value."""

    STRING = "string"
    INT = "int"
    BOOL = "bool"
    VERSION = "version"


# --- placeholders -------------------------------------------------------------------------------------------------


def _is_known(placeholder: re.Match[str]) -> bool:
    name, argument = placeholder.group(1), placeholder.group(2)
    if argument is None:
        return name in PLACEHOLDERS
    return name == BINARY_PLACEHOLDER and _COMPONENT.fullmatch(argument) is not None


def _unknown(placeholder: str) -> str:
    known = [*(f"{{{name}}}" for name in sorted(PLACEHOLDERS)), f"{{{BINARY_PLACEHOLDER}:<component>}}"]
    return f"unknown placeholder {placeholder}; known: {', '.join(known)}"


def unknown_placeholders(template: str) -> list[str]:
    """The placeholders in `template` that are not allowed (e.g. `{nodename}`), in order."""
    return [match.group(0) for match in _PLACEHOLDER.finditer(template) if not _is_known(match)]


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill in the placeholders of `template`; `values` maps placeholder names (`node`, `bin:kube`) to text."""

    def value(placeholder: re.Match[str]) -> str:
        if not _is_known(placeholder):
            raise UsageError(f"{template!r}: {_unknown(placeholder.group(0))}")
        name = placeholder.group(0)[1:-1]
        if name not in values:
            raise UsageError(f"{template!r}: no value for placeholder {placeholder.group(0)}")
        return values[name]

    return _PLACEHOLDER.sub(value, template)


class _UnknownPlaceholder(ValueError):
    """A template names a placeholder that does not exist (the schema's format check)."""


def _check_template(instance: object) -> bool:
    unknown = unknown_placeholders(instance) if isinstance(instance, str) else []
    if unknown:
        raise _UnknownPlaceholder(_unknown(unknown[0]))
    return True


def _is_hook_placeholder(placeholder: re.Match[str]) -> bool:
    name, argument = placeholder.group(1), placeholder.group(2)
    if argument is None:
        return name in HOOK_PLACEHOLDERS
    return name == BINARY_PLACEHOLDER and argument in HOOK_BINARIES


def _check_hook_template(instance: object) -> bool:
    text = instance if isinstance(instance, str) else ""
    unknown = [match.group(0) for match in _PLACEHOLDER.finditer(text) if not _is_hook_placeholder(match)]
    if unknown:
        known = [*(f"{{{name}}}" for name in sorted(HOOK_PLACEHOLDERS))]
        known += [f"{{{BINARY_PLACEHOLDER}:{name}}}" for name in sorted(HOOK_BINARIES)]
        raise _UnknownPlaceholder(f"unknown placeholder {unknown[0]} in a hook; known: {', '.join(known)}")
    return True


def render_hook(template: str, values: Mapping[str, str]) -> str:
    """Fill in the placeholders of hook template `template`; `values` maps names (`device`, `bin:...`) to text."""

    def value(placeholder: re.Match[str]) -> str:
        name = placeholder.group(0)[1:-1]
        if not _is_hook_placeholder(placeholder) or name not in values:
            raise UsageError(f"{template!r}: no value for placeholder {placeholder.group(0)} in a hook")
        return values[name]

    return _PLACEHOLDER.sub(value, template)


# --- the model ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessTemplate:
    """The command line and environment of one driver process, before placeholders are filled in."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, values: Mapping[str, str]) -> list[str]:
        """The rendered command line: command, then args."""
        return [render(word, values) for word in (*self.command, *self.args)]

    def environment(self, values: Mapping[str, str]) -> dict[str, str]:
        """The rendered variables to add to the environment."""
        return {name: render(value, values) for name, value in self.env.items()}

    def uses(self, placeholder: str) -> bool:
        """Whether a word of the command line or a variable's value uses `{placeholder}`."""
        return any(match.group(1) == placeholder for word in self.templates() for match in _PLACEHOLDER.finditer(word))

    def templates(self) -> tuple[str, ...]:
        """Every template of it: the command line's words and the variables' values."""
        return (*self.command, *self.args, *self.env.values())


@dataclass(frozen=True)
class RunSpec:
    """How the local backend runs the driver: one process per fake node."""

    process: ProcessTemplate
    create_dirs: tuple[str, ...] = ()
    # Other builds by name (`previous`), complete: what a version does not set comes from `process`.
    versions: Mapping[str, ProcessTemplate] = field(default_factory=dict)

    def directories(self, values: Mapping[str, str]) -> list[Path]:
        """The rendered directories to create before each start."""
        return [Path(render(directory, values)) for directory in self.create_dirs]

    def binaries(self) -> frozenset[str]:
        """The pinned binaries its templates name (`{bin:dra_test_driver}` -> "dra_test_driver"), every build's."""
        templates = [*self.create_dirs, *(t for p in (self.process, *self.versions.values()) for t in p.templates())]
        return frozenset(
            match.group(2)
            for template in templates
            for match in _PLACEHOLDER.finditer(template)
            if match.group(1) == BINARY_PLACEHOLDER and match.group(2)
        )


class PatchType(StrEnum):
    """How a patch of `install.transform.patches` applies: `kubectl patch --type`."""

    STRATEGIC = "strategic"
    MERGE = "merge"
    JSON = "json"


class PullPolicy(StrEnum):
    """The image pull policies `install.transform.imagePullPolicy` may set: those that use an imported image."""

    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


@dataclass(frozen=True)
class PatchTarget:
    """The one object of the manifests a patch applies to; no namespace: the only one of that kind and name."""

    kind: str
    name: str
    namespace: str | None = None

    def describe(self) -> str:
        """`DaemonSet drivers/gpu`, as transform lines name objects."""
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass(frozen=True)
class ManifestPatch:
    """One patch of `install.transform.patches`."""

    target: PatchTarget
    # A mapping (strategic, merge) or a list of RFC 6902 operations (json), as the profile gives it.
    patch: Any
    type: PatchType


@dataclass(frozen=True)
class ImageRewrite:
    """One entry of `install.transform.images`, the shape of kustomize's `images` field."""

    name: str
    new_name: str | None = None
    new_tag: str | None = None
    digest: str | None = None

    def kustomization(self) -> dict[str, str]:
        """The entry as a kustomization's `images` lists it."""
        fields = {"name": self.name, "newName": self.new_name, "newTag": self.new_tag, "digest": self.digest}
        return {key: value for key, value in fields.items() if value is not None}


@dataclass(frozen=True)
class Transforms:
    """Changes the local backend makes to a vendor's manifests, each declared in the profile and printed."""

    # Pod templates get a required node affinity to the real nodes (kubernetes.io/hostname In [...]).
    pin_to_real_nodes: bool = False
    # Pod templates run in the host's network and reach the API server at its host address
    # (KUBERNETES_SERVICE_HOST/PORT), because the local cluster runs no kube-proxy for the `kubernetes` Service.
    api_server_from_host: bool = False
    # Pod templates tolerate the real node's taint; None: as the profile leaves it, which follows pin_to_real_nodes
    # (see `tolerates_real_node_taint`).
    tolerate_real_node_taint: bool | None = None
    # Namespaces created first, as `helm install --create-namespace` does.
    create_namespaces: tuple[str, ...] = ()
    # Image rewrites (kustomize's `images`), applied by `kubectl kustomize`.
    images: tuple[ImageRewrite, ...] = ()
    # Set on every container and init container; None: as the manifests say.
    image_pull_policy: PullPolicy | None = None
    # Patches of single objects, applied by `kubectl patch --local`.
    patches: tuple[ManifestPatch, ...] = ()
    # A kustomize overlay directory (resolved against the profile's), its `resources` replaced by the manifests.
    kustomize: Path | None = None

    @property
    def tolerates_real_node_taint(self) -> bool:
        """Whether pod templates get the real node's toleration: as declared, else whenever they are pinned there."""
        return self.pin_to_real_nodes if self.tolerate_real_node_taint is None else self.tolerate_real_node_taint


@dataclass(frozen=True)
class PreviousRelease:
    """The driver's release before the one installed, as shipped (`install.previous`): what an upgrade starts from."""

    images: tuple[Path, ...]
    manifests: tuple[Path, ...]


@dataclass(frozen=True)
class CannotStart:
    """How to make a release of the driver that cannot start (`install.cannotStart`), for the failed-rollout check.

    `args` are appended to the driver container's arguments; with none, the container's command is replaced by one
    that does not exist (a release whose program is missing).
    """

    args: tuple[str, ...] = ()
    # The container of the DaemonSet's pod template that runs the driver; None: the first.
    container: str | None = None


@dataclass(frozen=True)
class InstallSpec:
    """The driver as a vendor ships it: image archives loaded onto the nodes and manifests applied as they are."""

    # OCI image archives (`docker save`, `skopeo copy ... oci-archive:`), resolved against the profile's directory.
    images: tuple[Path, ...]
    # Manifest files (a rendered chart), resolved against the profile's directory; any kind the API server serves.
    manifests: tuple[Path, ...]
    transforms: Transforms = field(default_factory=Transforms)
    # The release before this one (transformed as this one is), for the upgrade check; None: not applicable.
    previous: PreviousRelease | None = None
    cannot_start: CannotStart = field(default_factory=CannotStart)
    # The profile file, which messages about the install name.
    source: Path | None = None


@dataclass(frozen=True)
class ServiceAccountRef:
    """The ServiceAccount the driver's kubelet plugin runs as."""

    namespace: str
    name: str

    @property
    def username(self) -> str:
        """The name the API server knows its tokens by (audit log, authorization)."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@dataclass(frozen=True)
class ControllerIdentity:
    """The identity of the driver's controller side (e.g. what writes binding conditions), not the kubelet plugin's."""

    service_account: ServiceAccountRef
    # Its RBAC manifests, resolved against the profile's directory.
    rbac: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Identity:
    """Who the driver is in the cluster."""

    service_account: ServiceAccountRef
    # Manifests to install and audit, resolved against the profile's directory.
    rbac: tuple[Path, ...] = ()
    # The token is bound to a pod on the node (carries the node-name claim), as a DaemonSet pod's is.
    node_bound_token: bool = True
    # The controller side's own identity, where the driver has one.
    controller: ControllerIdentity | None = None


@dataclass(frozen=True)
class DeviceClassSpec:
    """A DeviceClass the suite's claims use: created by the suite, or expected to exist."""

    name: str
    create: bool
    # CEL expressions (templates) of a class the suite creates; empty for a class that must exist.
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceExpectations:
    """What the driver publishes on each node."""

    per_node: int
    from_slices: bool = True
    attributes: Mapping[str, AttributeType] = field(default_factory=dict)
    # Capacities every device publishes (names, optionally domain-qualified), which selectors may compare as
    # quantities.
    capacity: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigEffect:
    """What one opaque config's parameters do to each device they apply to, as the profile declares it."""

    # An environment entry (name, value) in the container edits of the device's CDI devices.
    cdi_env: tuple[str, str] | None = None
    # Keys and values in the data of the device's status.devices entry.
    status_data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigSample:
    """A parameters object the driver accepts (apiVersion and kind included) and its declared effect."""

    parameters: Mapping[str, Any]
    effect: ConfigEffect


@dataclass(frozen=True)
class OpaqueConfigAPI:
    """The driver's opaque configuration API (`opaqueConfig`): two samples with told-apart effects, one unparsable."""

    api_version: str
    kind: str
    samples: tuple[ConfigSample, ConfigSample]
    # A complete parameters object the driver cannot decode; None: the unparsable-config check is not applicable.
    unparsable: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Hook:
    """One action of a `health` hook: a command to run, a file to write, or a file to remove (templates)."""

    command: tuple[str, ...] = ()
    # (path, content) of `writeFile`.
    write_file: tuple[str, str] | None = None
    remove_file: str | None = None

    def describe(self) -> str:
        """The action as the profile gives it, for messages."""
        if self.command:
            return f"command {list(self.command)}"
        if self.write_file is not None:
            return f"write {self.write_file[1]!r} to {self.write_file[0]}"
        return f"remove {self.remove_file}"


@dataclass(frozen=True)
class HealthHooks:
    """How the suite makes one device unhealthy and healthy again (`health`)."""

    make_unhealthy: Hook
    make_healthy: Hook


@dataclass(frozen=True)
class TimeoutScaling:
    """Factors for the named deadlines: `per_name` for one deadline, else `multiplier`."""

    multiplier: float = 1.0
    per_name: Mapping[str, float] = field(default_factory=dict)

    def factor(self, name: str) -> float:
        """The factor of the deadline `name`."""
        return self.per_name.get(name, self.multiplier)

    def apply(self, base: Timeouts) -> Timeouts:
        """`base` with every deadline scaled."""
        return base.override(**{name: getattr(base, name) * self.factor(name) for name in Timeouts.names()})


@dataclass(frozen=True)
class DriverProfile:
    """A validated driver profile."""

    source: Path
    # Short sha256 of the file's bytes, for reports.
    digest: str
    driver: str
    identity: Identity
    device_classes: tuple[DeviceClassSpec, ...]
    devices: DeviceExpectations
    capabilities: frozenset[Capability]
    version: str | None = None
    # None: the driver is installed in the cluster, nothing to run.
    run: RunSpec | None = None
    # The driver as shipped (images + manifests) for the local backend to install; exclusive with `run`.
    install: InstallSpec | None = None
    # Where the driver runs (`nodes`): every node, or real nodes only.
    nodes: NodeScope = NodeScope.ALL
    timeouts: TimeoutScaling = field(default_factory=TimeoutScaling)
    strictness: Strictness = Strictness.CONTRACT
    # Directories outside its own and the run's that the profile may name (`hostPaths`), absolute; printed at start.
    host_paths: tuple[Path, ...] = ()
    # Its opaque configuration API (`opaqueConfig`); None: the opaque-config checks are not applicable.
    opaque_config: OpaqueConfigAPI | None = None
    # How to make a device unhealthy and healthy again (`health`); None: the unhealthy-device check is not applicable.
    health: HealthHooks | None = None

    @property
    def real_nodes_only(self) -> bool:
        """Whether the driver runs on real nodes only (checks that need it on a fake node are not applicable)."""
        return self.nodes is NodeScope.REAL_ONLY

    def declares(self, capability: Capability) -> bool:
        """Whether the profile claims `capability` (one not delivered then fails)."""
        return capability in self.capabilities

    @property
    def fault_switches(self) -> bool:
        """Whether the driver the run installed answers the reference driver's control API (its fault switches).

        `referenceFaults` implies it (the suite starts that program); `faultSwitches` declares it for the installed
        instances alone, as for the reference driver's shipped image, whose switches checks may use but whose
        program the suite does not start as private instances.
        """
        return self.declares(Capability.REFERENCE_FAULTS) or self.declares(Capability.FAULT_SWITCHES)


# --- the schema ---------------------------------------------------------------------------------------------------


@functools.cache
def schema() -> dict[str, Any]:
    """The profile's JSON Schema (2020-12), shipped as package data."""
    text = resources.files("dra_conformance.driver").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    formats = jsonschema.FormatChecker(formats=())
    formats.checks(TEMPLATE_FORMAT, raises=_UnknownPlaceholder)(_check_template)
    formats.checks(HOOK_TEMPLATE_FORMAT, raises=_UnknownPlaceholder)(_check_hook_template)
    return jsonschema.Draft202012Validator(schema(), format_checker=formats)


# --- locating problems --------------------------------------------------------------------------------------------


def _child(node: yaml.Node, step: str | int) -> tuple[yaml.Mark, yaml.Node] | None:
    """Where `step` below `node` starts (a mapping entry's key, a sequence item) and the node it leads to."""
    if isinstance(node, yaml.MappingNode):
        return next(((key.start_mark, value) for key, value in node.value if key.value == str(step)), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
        item: yaml.Node = node.value[step]
        return item.start_mark, item
    return None


def _one_line(text: str) -> str:
    """`text` with line breaks and other unprintable characters escaped: keys and values may hold them."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


@dataclass(frozen=True)
class _Document:
    """A profile file's data and the YAML nodes that locate every key and value in it."""

    path: Path
    data: Any
    root: yaml.Node

    def line_of(self, steps: KeyPath) -> int:
        """Line of the deepest key or item of `steps` present in the file (the parent, for a missing field)."""
        node, mark = self.root, self.root.start_mark
        for step in steps:
            found = _child(node, step)
            if found is None:
                break
            mark, node = found
        return int(mark.line) + 1

    def error(self, steps: KeyPath, problem: str, line: int | None = None) -> ProfileError:
        """The one-line error for `problem` at `steps`."""
        return ProfileError(
            str(self.path), line or self.line_of(steps), _one_line(format_key_path(steps)), _one_line(problem)
        )

    def first(self, problems: Iterable[tuple[KeyPath, str]]) -> ProfileError | None:
        """The error for the problem nearest the top of the file, if any."""
        located = [(self.line_of(steps), index, steps, problem) for index, (steps, problem) in enumerate(problems)]
        if not located:
            return None
        line, _, steps, problem = min(located)  # by line, then by the order found
        return self.error(steps, problem, line)


def _parse(path: Path, content: bytes) -> _Document:
    """Parse the file within bounds; bad bytes, YAML errors, alias bombs and non-mappings are located problems."""
    try:
        composed = bounded_yaml.compose_one(bounded_yaml.decode(content))
    except bounded_yaml.BoundedYamlError as error:
        raise ProfileError(str(path), error.line, TOP_LEVEL, _one_line(error.problem)) from None
    root, data = composed.root, composed.data
    if root is None or not isinstance(data, dict):
        line = 1 if root is None else root.start_mark.line + 1
        raise ProfileError(str(path), line, TOP_LEVEL, "a driver profile is a mapping (apiVersion, kind, driver, ...)")
    return _Document(path, data, root)


def _duplicate_key(root: yaml.Node) -> tuple[KeyPath, int] | None:
    """The first key given twice in one mapping (YAML keeps the last silently), with its line.

    Each node is walked once, however many aliases refer to it: linear in the document's size. The walk is depth
    first in document order, a duplicate key taking its place among the values, so the first one in the file wins.
    """
    walked: set[int] = set()
    # A node to walk, or (as an int: its line) a duplicate key found at that place of the walk.
    stack: list[tuple[yaml.Node | int, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        node, steps = stack.pop()
        if isinstance(node, int):
            return steps, node
        if id(node) in walked:
            continue
        walked.add(id(node))
        children: list[tuple[yaml.Node | int, tuple[str | int, ...]]] = []
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                name = str(key.value)
                if name in keys:
                    children.append((key.start_mark.line + 1, (*steps, name)))
                    break
                keys.add(name)
                children.append((value, (*steps, name)))
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, (*steps, index)) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return None


def _file_problem(path: Path) -> str | None:
    """Why `path` is not a manifest file to read (missing, unreadable, not Kubernetes objects); None if it is one."""
    try:
        found = path.is_file()
    except OSError as error:  # a name too long, ...
        return f"{path}: {error.strerror or error}"
    return manifest_files.problem(path) if found else f"file not found: {path}"


def _reference_problems(data: Mapping[str, Any], directory: Path) -> Iterator[tuple[KeyPath, str]]:
    """What the schema cannot say: manifest files hold objects, selectors only on created classes, unique names."""
    identity = data["identity"]
    named: list[tuple[KeyPath, str]] = [
        (["identity", "rbac", i], name) for i, name in enumerate(identity.get("rbac", []))
    ]
    controller = identity.get("controller", {})
    named += [(["identity", "controller", "rbac", i], name) for i, name in enumerate(controller.get("rbac", []))]
    install = data.get("install", {})
    named += [(["install", "manifests", i], name) for i, name in enumerate(install.get("manifests", []))]
    for steps, relative in named:
        problem = _file_problem(directory / relative)
        if problem is not None:
            yield steps, problem
    yield from _transform_problems(install.get("transform", {}), directory)
    if "install" in data and "run" in data:
        yield ["install"], "run and install exclude each other: the driver is either run as a process or installed"
    if "install" in data and data.get("nodes") != NodeScope.REAL_ONLY:
        yield ["install"], "an installed driver runs in pods, which only real nodes run: set nodes: realOnly"
    names: set[str] = set()
    for index, device_class in enumerate(data["deviceClasses"]):
        if "selectors" in device_class and not device_class["create"]:
            yield (
                ["deviceClasses", index, "selectors"],
                "only for a class the suite creates (create: true); an existing class is used as it is",
            )
        if device_class["name"] in names:
            yield ["deviceClasses", index, "name"], f"class {device_class['name']!r} is listed twice"
        names.add(device_class["name"])


# The names kustomize reads a directory's kustomization from.
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization_file(directory: Path) -> Path | None:
    """The kustomization of `directory`, if it holds one."""
    return next((directory / name for name in KUSTOMIZATION_FILES if (directory / name).is_file()), None)


def _transform_problems(transform: Mapping[str, Any], directory: Path) -> Iterator[tuple[KeyPath, str]]:
    """What the schema cannot say of `install.transform`: the overlay exists, patches and rewrites say something."""
    steps: list[str | int] = ["install", "transform"]
    if "kustomize" in transform:
        overlay = directory / transform["kustomize"]
        if not overlay.is_dir():
            yield [*steps, "kustomize"], f"directory not found: {overlay}"
        elif kustomization_file(overlay) is None:
            yield [*steps, "kustomize"], f"{overlay} holds no {' or '.join(KUSTOMIZATION_FILES)}"
    for index, rewrite in enumerate(transform.get("images", [])):
        if not {"newName", "newTag", "digest"} & set(rewrite):
            yield [*steps, "images", index], "changes nothing: give newName, newTag or digest"
    for index, patch in enumerate(transform.get("patches", [])):
        kind = patch.get("type")
        if kind == PatchType.JSON and not isinstance(patch["patch"], list):
            yield [*steps, "patches", index, "patch"], "a json patch is a list of operations ({op, path, value})"
        if kind in (PatchType.STRATEGIC, PatchType.MERGE) and not isinstance(patch["patch"], dict):
            yield [*steps, "patches", index, "patch"], f"a {kind} patch is a mapping; a list of operations is type json"


def _validate(document: _Document) -> None:
    duplicate = _duplicate_key(document.root)
    if duplicate is not None:
        raise document.error(duplicate[0], "duplicate key", duplicate[1])
    problem = document.first(schema_problem(error) for error in _validator().iter_errors(document.data))
    problem = problem or document.first(confinement.problems(document.data, document.path.parent.absolute()))
    problem = problem or document.first(_reference_problems(document.data, document.path.parent))
    problem = problem or document.first(_opaque_config_problems(document.data))
    problem = problem or document.first(_health_problems(document.data, document.path.parent.absolute()))
    if problem is not None:
        raise problem


# The largest parameters object of a sample, as JSON: the API allows 10 KiB for the raw parameters.
MAX_SAMPLE_PARAMETERS = 8 * 1024


def _opaque_config_problems(data: Mapping[str, Any]) -> Iterator[tuple[KeyPath, str]]:
    """What the schema cannot say of `opaqueConfig`: the two samples' effects set the same things to other values."""
    section = data.get("opaqueConfig")
    if section is None:
        return
    first, second = section["samples"]
    for index, sample in enumerate(section["samples"]):
        if len(json.dumps(sample["parameters"])) > MAX_SAMPLE_PARAMETERS:
            yield ["opaqueConfig", "samples", index, "parameters"], f"more than {MAX_SAMPLE_PARAMETERS} bytes as JSON"
    one, other = first["effect"], second["effect"]
    where: KeyPath = ["opaqueConfig", "samples", 1, "effect"]
    if set(one) != set(other):
        yield where, f"declares {sorted(other)}, the first sample {sorted(one)}: both declare the same observations"
        return
    if "cdiEnv" in one:
        (name, value), (other_name, other_value) = (str(e["cdiEnv"]).split("=", 1) for e in (one, other))
        if name != other_name or value == other_value:
            yield (
                [*where, "cdiEnv"],
                f"{other['cdiEnv']} against the first sample's {one['cdiEnv']}: the same variable with another value, "
                "so that the one that applied is told apart",
            )
    if "statusData" in one and (
        set(one["statusData"]) != set(other["statusData"])
        or any(one["statusData"][key] == other["statusData"][key] for key in one["statusData"])
    ):
        yield (
            [*where, "statusData"],
            f"{other['statusData']} against the first sample's {one['statusData']}: the same keys, each with another "
            "value, so that the one that applied is told apart",
        )


def _health_problems(data: Mapping[str, Any], directory: Path) -> Iterator[tuple[KeyPath, str]]:
    """What the schema cannot say of `health`: the stream its hooks are judged on is declared; where hooks reach."""
    section = data.get("health")
    if section is None:
        return
    if not data["capabilities"].get(Capability.HEALTH_STREAM, False):
        yield ["health"], f"its hooks are judged on the health stream: declare capabilities.{Capability.HEALTH_STREAM}"
    for name in ("makeUnhealthy", "makeHealthy"):
        yield from confinement.hook_problems(section[name], ["health", name], data, directory)


# --- building the model -------------------------------------------------------------------------------------------


def _process(raw: Mapping[str, Any], inherited: ProcessTemplate | None = None) -> ProcessTemplate:
    """A process template from `raw`; what `raw` does not set comes from `inherited`."""
    base = inherited or ProcessTemplate(command=())
    return ProcessTemplate(
        command=tuple(raw.get("command", base.command)),
        args=tuple(raw.get("args", base.args)),
        env=dict(raw.get("env", base.env)),
    )


def _run(raw: Mapping[str, Any] | None) -> RunSpec | None:
    if raw is None:
        return None
    process = _process(raw)
    return RunSpec(
        process=process,
        create_dirs=tuple(raw.get("createDirs", ())),
        versions={name: _process(version, process) for name, version in raw.get("versions", {}).items()},
    )


def _install(raw: Mapping[str, Any] | None, directory: Path, source: Path) -> InstallSpec | None:
    if raw is None:
        return None
    transform = raw.get("transform", {})
    return InstallSpec(
        images=tuple((directory / relative).resolve() for relative in raw.get("images", ())),
        manifests=tuple((directory / relative).resolve() for relative in raw["manifests"]),
        transforms=Transforms(
            pin_to_real_nodes=transform.get("pinToRealNodes", False),
            api_server_from_host=transform.get("apiServerFromHost", False),
            tolerate_real_node_taint=transform.get("tolerateRealNodeTaint"),
            create_namespaces=tuple(transform.get("createNamespaces", ())),
            images=tuple(
                ImageRewrite(item["name"], item.get("newName"), item.get("newTag"), item.get("digest"))
                for item in transform.get("images", ())
            ),
            image_pull_policy=PullPolicy(transform["imagePullPolicy"]) if "imagePullPolicy" in transform else None,
            patches=tuple(_patch(item) for item in transform.get("patches", ())),
            kustomize=(directory / transform["kustomize"]).resolve() if "kustomize" in transform else None,
        ),
        previous=_previous_release(raw.get("previous"), directory),
        cannot_start=CannotStart(
            args=tuple(raw.get("cannotStart", {}).get("args", ())),
            container=raw.get("cannotStart", {}).get("container"),
        ),
        source=source,
    )


def _previous_release(raw: Mapping[str, Any] | None, directory: Path) -> PreviousRelease | None:
    if raw is None:
        return None
    return PreviousRelease(
        images=tuple((directory / relative).resolve() for relative in raw.get("images", ())),
        manifests=tuple((directory / relative).resolve() for relative in raw["manifests"]),
    )


def _patch(raw: Mapping[str, Any]) -> ManifestPatch:
    target = raw["target"]
    default = PatchType.JSON if isinstance(raw["patch"], list) else PatchType.STRATEGIC
    return ManifestPatch(
        target=PatchTarget(target["kind"], target["name"], target.get("namespace")),
        patch=raw["patch"],
        type=PatchType(raw.get("type", default)),
    )


def _account(raw: Mapping[str, Any]) -> ServiceAccountRef:
    return ServiceAccountRef(namespace=raw["namespace"], name=raw["name"])


def _identity(raw: Mapping[str, Any], directory: Path) -> Identity:
    controller = raw.get("controller")
    return Identity(
        service_account=_account(raw["serviceAccount"]),
        rbac=tuple((directory / relative).resolve() for relative in raw.get("rbac", ())),
        node_bound_token=raw.get("nodeBoundToken", True),
        controller=None
        if controller is None
        else ControllerIdentity(
            _account(controller["serviceAccount"]),
            tuple((directory / relative).resolve() for relative in controller.get("rbac", ())),
        ),
    )


def _device_class(raw: Mapping[str, Any]) -> DeviceClassSpec:
    return DeviceClassSpec(name=raw["name"], create=raw["create"], selectors=tuple(raw.get("selectors", ())))


def _devices(raw: Mapping[str, Any]) -> DeviceExpectations:
    return DeviceExpectations(
        per_node=int(raw["perNode"]),
        from_slices=raw.get("fromSlices", True),
        attributes={name: AttributeType(kind) for name, kind in raw.get("attributes", {}).items()},
        capacity=tuple(raw.get("capacity", ())),
    )


def _opaque_config(raw: Mapping[str, Any] | None) -> OpaqueConfigAPI | None:
    if raw is None:
        return None
    header = {"apiVersion": raw["apiVersion"], "kind": raw["kind"]}

    def sample(item: Mapping[str, Any]) -> ConfigSample:
        effect = item["effect"]
        env = str(effect["cdiEnv"]).split("=", 1) if "cdiEnv" in effect else None
        return ConfigSample(
            parameters={**header, **item["parameters"]},
            effect=ConfigEffect(
                cdi_env=None if env is None else (env[0], env[1]),
                status_data=dict(effect.get("statusData", {})),
            ),
        )

    first, second = raw["samples"]
    return OpaqueConfigAPI(
        api_version=raw["apiVersion"],
        kind=raw["kind"],
        samples=(sample(first), sample(second)),
        unparsable=raw.get("unparsable"),
    )


def _hook(raw: Mapping[str, Any]) -> Hook:
    written = raw.get("writeFile")
    return Hook(
        command=tuple(raw.get("command", ())),
        write_file=None if written is None else (written["path"], written["content"]),
        remove_file=raw.get("removeFile"),
    )


def _health(raw: Mapping[str, Any] | None) -> HealthHooks | None:
    if raw is None:
        return None
    return HealthHooks(make_unhealthy=_hook(raw["makeUnhealthy"]), make_healthy=_hook(raw["makeHealthy"]))


def _timeouts(raw: Mapping[str, Any]) -> TimeoutScaling:
    return TimeoutScaling(
        multiplier=float(raw.get("multiplier", 1.0)),
        per_name={name: float(factor) for name, factor in raw.get("perName", {}).items()},
    )


def _short_sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:HASH_LENGTH]


def profile_hash(path: Path) -> str:
    """Short sha256 of the profile file's bytes: which profile a report was made with."""
    return _short_sha256(path.read_bytes())


def load_profile(path: Path) -> DriverProfile:
    """Read and validate a driver profile; any problem is a one-line ProfileError naming file, line and key path."""
    try:
        content = path.read_bytes()
    except OSError as error:
        raise UsageError(f"driver profile {path}: {error.strerror or error}") from None
    document = _parse(path, content)
    _validate(document)
    raw, directory = document.data, path.parent
    return DriverProfile(
        source=path,
        digest=_short_sha256(content),
        driver=raw["driver"],
        version=raw.get("version"),
        run=_run(raw.get("run")),
        install=_install(raw.get("install"), directory, path),
        nodes=NodeScope(raw.get("nodes", NodeScope.ALL)),
        identity=_identity(raw["identity"], directory),
        device_classes=tuple(_device_class(item) for item in raw["deviceClasses"]),
        devices=_devices(raw["devices"]),
        capabilities=frozenset(Capability(name) for name, declared in raw["capabilities"].items() if declared),
        timeouts=_timeouts(raw.get("timeouts", {})),
        strictness=Strictness(raw.get("strictness", Strictness.CONTRACT)),
        host_paths=confinement.host_paths(raw, directory.absolute()),
        opaque_config=_opaque_config(raw.get("opaqueConfig")),
        health=_health(raw.get("health")),
    )

"""Driver profiles: the shipped ones load and agree with their drivers; every bad input is one located line."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from dra_conformance import paths
from dra_conformance.driver.profile import (
    PLACEHOLDERS,
    AttributeType,
    Capability,
    DriverProfile,
    ProcessTemplate,
    Strictness,
    load_profile,
    profile_hash,
    render,
    schema,
)
from dra_conformance.driver.reference import GO_BUILD_DETAIL, driver_argv, reference_program
from dra_conformance.errors import DriverError, ProfileError, UsageError
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.timeouts import Timeouts
from tests.driver_flags import option_values

PROFILES = paths.fixtures_dir() / "profiles"
SHIPPED = ("reference-driver", "upstream-test-driver")

# Line numbers below refer to this text (line 1 is `apiVersion`).
VALID = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
run:
  command: ["{python}", "-m", "gpu_driver"]
  args:
  - --node={node}
  - --socket={socket_path}
  - --helper={bin:kube}
  env: {STATE: "{data_dir}/state"}
identity:
  serviceAccount: {namespace: drivers, name: gpu}
  rbac: [rbac.yaml]
deviceClasses:
- name: gpu
  create: true
  selectors: ['device.driver == "{driver}"']
devices:
  perNode: 2
  attributes: {model: string}
capabilities:
  statusDevices: true
  healthStream: true
timeouts:
  perName: {driver_ready: 2}
"""


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "rbac.yaml").write_text(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: gpu, namespace: drivers}\n"
    )
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def _changed(old: str, new: str) -> str:
    assert VALID.count(old) == 1, f"{old!r} is not one line of VALID"
    return VALID.replace(old, new)


def _values(root: Path) -> dict[str, str]:
    """A value for every placeholder, as a backend would give them for node-a."""
    kubelet_root = root / "kubelet"
    return {
        "driver": "gpu.example.com",
        "node": "node-a",
        "kubeconfig": str(root / "driver.kubeconfig"),
        "registrar_dir": str(kubelet_root / "plugins_registry"),
        "plugins_dir": str(kubelet_root / "plugins" / "gpu.example.com"),
        "cdi_dir": str(root / "cdi"),
        "socket_path": str(kubelet_root / "plugins" / "gpu.example.com" / "dra.sock"),
        "data_dir": str(root / "state"),
        "kubelet_root": str(kubelet_root),
        "python": "/usr/bin/python3",
        "devices": "8",
        "bin:kube": "/cache/bin/kube",
        "bin:dra_test_driver": "/cache/bin/dra-test-driver",
        "bin:reference_driver_go": "/cache/bin/reference-driver-go",
    }


def _shipped(name: str) -> DriverProfile:
    return load_profile(PROFILES / f"{name}.yaml")


def _manifests(profile: DriverProfile) -> list[dict[str, Any]]:
    return [doc for path in profile.identity.rbac for doc in yaml.safe_load_all(path.read_text()) if doc]


# --- the shipped profiles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_and_its_service_account_is_in_its_rbac(name: str) -> None:
    profile = _shipped(name)
    account = profile.identity.service_account
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in _manifests(profile)
        if d["kind"] == "ServiceAccount"
    }
    assert (account.namespace, account.name) in accounts, accounts
    assert profile.run is not None and profile.digest == profile_hash(profile.source)


def test_reference_profile_runs_the_fake_driver_with_its_real_flags_devices_and_rbac(tmp_path: Path) -> None:
    profile = _shipped("reference-driver")
    assert profile.run is not None
    argv = profile.run.process.argv(_values(tmp_path) | {"driver": profile.driver})
    assert argv[0] == "/cache/bin/reference-driver-go", argv
    flags = option_values(argv[1:])
    assert (flags["driver-name"], flags["node-name"], flags["devices"], flags["profile"]) == (
        profile.driver,
        "node-a",
        str(profile.devices.per_node),
        "gpu",
    )
    assert [path.read_bytes() for path in profile.identity.rbac] == [paths.reference_driver_rbac().read_bytes()]
    assert set(profile.capabilities) >= {
        Capability.STATUS_DEVICES,
        Capability.HEALTH_STREAM,
        Capability.REFERENCE_FAULTS,
    }


def test_the_reference_profile_runs_the_go_build_and_names_its_release_before() -> None:
    profile = _shipped("reference-driver")
    assert profile.run is not None
    assert profile.run.process.command == ("{bin:reference_driver_go}",)
    current, previous = profile.run.process.args, profile.run.versions["previous"].args
    changed = [(now, before) for now, before in zip(current, previous, strict=True) if now != before]
    assert changed == [("--driver-version=2.0.0", "--driver-version=1.0.0")], changed
    assert profile.strictness == Strictness.STRICT


def test_private_reference_driver_instances_run_the_binary_the_backend_built(tmp_path: Path) -> None:
    endpoint = DriverEndpoint("gpu-x.fake-dra.example.com", "kwok-node-0", tmp_path / "kubelet", tmp_path / "cdi")
    argv = driver_argv(
        endpoint,
        kubeconfig=tmp_path / "k",
        state_dir=tmp_path / "s",
        cdi_dir=tmp_path / "cdi",
        program=reference_program({GO_BUILD_DETAIL: "/cache/bin/reference_driver_go"}),
    )
    assert argv[0] == "/cache/bin/reference_driver_go", argv
    assert option_values(argv[1:])["driver-name"] == endpoint.driver
    with pytest.raises(DriverError, match=GO_BUILD_DETAIL):
        reference_program({})


def test_upstream_test_driver_profile_runs_the_pinned_binary_and_declares_only_what_it_does(tmp_path: Path) -> None:
    profile = _shipped("upstream-test-driver")
    assert profile.run is not None
    values = _values(tmp_path) | {"driver": profile.driver}
    argv = profile.run.process.argv(values)
    assert argv[:2] == ["/cache/bin/dra-test-driver", "kubelet-plugin"], argv
    assert f"--datadir={values['kubelet_root']}/plugins" in argv
    assert profile.run.directories(values) == [Path(values["plugins_dir"])]
    assert not profile.declares(Capability.STATUS_DEVICES) and not profile.declares(Capability.REFERENCE_FAULTS)
    assert (profile.devices.per_node, profile.devices.attributes) == (4, {})


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_sets_its_device_count_through_the_devices_placeholder(name: str, tmp_path: Path) -> None:
    profile = _shipped(name)
    assert profile.run is not None and profile.run.process.uses("devices"), profile.run
    argv = profile.run.process.argv(_values(tmp_path) | {"devices": "1000"})
    assert any(word.endswith("=1000") and "devices" in word for word in argv), argv


def test_a_placeholder_in_an_environment_value_counts_as_used() -> None:
    template = ProcessTemplate(command=("driver",), env={"NUM_DEVICES": "{devices}"})
    assert template.uses("devices") and not template.uses("node")
    assert template.environment({"devices": "12"}) == {"NUM_DEVICES": "12"}


# --- one source of truth: the schema documents what the code knows -------------------------------------------------


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for item in node:
            yield from _objects(item)


def test_schema_is_valid_closed_and_documented() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    for node in _objects(schema()):
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, sorted(node["properties"])
        for name, prop in node.get("properties", {}).items() if node.get("type") == "object" else ():
            assert prop.get("description"), f"property {name} has no description"


def test_capability_enum_equals_the_schema_capabilities() -> None:
    assert [c.value for c in Capability] == list(schema()["properties"]["capabilities"]["properties"])


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ([s.value for s in Strictness], ("strictness", "enum")),
        ([t.value for t in AttributeType], ("devices", "attributes", "additionalProperties", "enum")),
        (Timeouts.names(), ("timeouts", "perName", "propertyNames", "enum")),
    ],
    ids=["strictness", "attribute-types", "timeout-names"],
)
def test_schema_enums_equal_the_code(values: list[str], where: tuple[str, ...]) -> None:
    node = schema()["properties"][where[0]]
    for step in where[1:]:
        node = node["properties"][step] if step in node.get("properties", {}) else node[step]
    assert node == values


def test_schema_documents_every_placeholder() -> None:
    described = schema()["$defs"]["template"]["description"]
    assert set(re.findall(r"\{(\w+)\}", described)) == PLACEHOLDERS
    assert "{bin:<component>}" in described


# --- every bad input is one line: file, line, key path, problem ----------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "line", "key_path", "problem"),
    [
        ("  healthStream: true", "  healthStrem: true", 23, "capabilities.healthStrem", "unknown key"),
        ("  perNode: 2", "  perNode: two", 19, "devices.perNode", "'two' is not of type 'integer'"),
        ("  - --socket={socket_path}", "  - 8", 8, "run.args[1]", "8 is not of type 'string'"),
        ("  attributes: {model: string}", "  attributes: {model: float}", 20, "devices.attributes.model", "not one of"),
        ("driver: gpu.example.com", "driver: GPU.example.com", 3, "driver", "does not match"),
        ("  - --node={node}", "  - --node={nodename}", 7, "run.args[0]", "unknown placeholder {nodename}; known: "),
        ("  - --helper={bin:kube}", "  - --helper={bin:Kube}", 9, "run.args[2]", "unknown placeholder {bin:Kube}"),
        ('  env: {STATE: "{data_dir}/state"}', '  env: {STATE: "{datadir}"}', 10, "run.env.STATE", "{datadir}"),
        ("  rbac: [rbac.yaml]", "  rbac: [rbac.yaml, nope.yaml]", 13, "identity.rbac[1]", "file not found: "),
        ("{namespace: drivers, name: gpu}", "{namespace: drivers}", 12, "identity.serviceAccount.name", "missing"),
        ("  perName: {driver_ready: 2}", "  perName: {driver_redy: 2}", 25, "timeouts.perName.driver_redy", "not one"),
        ("  create: true", "  create: false", 17, "deviceClasses[0].selectors", "only for a class the suite creates"),
        (
            "  statusDevices: true",
            "  statusDevices: true\n  statusDevices: false",
            23,
            "capabilities.statusDevices",
            "dupl",
        ),
        ("  perNode: 2", "  perNode: 2: 3", 19, "(top level)", "not valid YAML: mapping values are not allowed here"),
        ("timeouts:", "strictness: lenient\ntimeouts:", 24, "strictness", "'lenient' is not one of"),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "wrong-type-in-list",
        "bad-attribute-type",
        "driver-not-dns",
        "unknown-placeholder",
        "bad-binary-component",
        "unknown-placeholder-in-env",
        "missing-rbac-file",
        "missing-required-field",
        "unknown-timeout-name",
        "selectors-on-existing-class",
        "duplicate-key",
        "yaml-syntax-error",
        "bad-strictness",
    ],
)
def test_bad_profile_is_one_line_with_file_line_and_key_path(
    tmp_path: Path, old: str, new: str, line: int, key_path: str, problem: str
) -> None:
    path = _write(tmp_path, _changed(old, new))
    with pytest.raises(ProfileError) as rejected:
        load_profile(path)
    message = str(rejected.value)
    assert message.startswith(f"{path}:{line}: {key_path}: ") and problem in message, message
    assert "\n" not in message, message
    assert (rejected.value.line, rejected.value.key_path) == (line, key_path)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("- a\n- list\n", 1, "a driver profile is a mapping"),
        ("", 1, "a driver profile is a mapping"),
        ("\n\nsome text\n", 3, "a driver profile is a mapping"),
    ],
    ids=["list", "empty", "scalar"],
)
def test_profile_that_is_not_a_mapping_is_rejected(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError, match=re.escape(f"{path}:{line}: (top level): {problem}")):
        load_profile(path)


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (b"driver: x\nkind: \xff\n", 2, "not UTF-8 text: invalid start byte"),
        (b"driver: x\nkind: a\x07\n", 2, "not valid YAML: special characters are not allowed"),
        (b"driver: [x,\n", 2, "not valid YAML: while parsing a flow node (line 2): expected the node content"),
        (b"driver: x\n---\nkind: y\n", 2, "not valid YAML: expected a single document in the stream"),
    ],
    ids=["not-utf8", "control-character", "unclosed-list", "two-documents"],
)
def test_unreadable_profile_is_one_located_line(tmp_path: Path, content: bytes, line: int, problem: str) -> None:
    path = tmp_path / "profile.yaml"
    path.write_bytes(content)
    with pytest.raises(ProfileError) as rejected:
        load_profile(path)
    assert str(rejected.value).startswith(f"{path}:{line}: (top level): {problem}"), str(rejected.value)
    assert "\n" not in str(rejected.value)


def test_missing_top_level_field_points_at_the_top(tmp_path: Path) -> None:
    path = _write(tmp_path, _changed("driver: gpu.example.com\n", ""))
    with pytest.raises(ProfileError, match=re.escape(f"{path}:1: driver: missing required field")):
        load_profile(path)


def test_missing_profile_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=re.escape(f"driver profile {tmp_path / 'absent.yaml'}: ")):
        load_profile(tmp_path / "absent.yaml")


def test_profile_error_survives_pickling() -> None:
    error = ProfileError("p.yaml", 3, "driver", "does not match")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.line, copy.key_path) == ("p.yaml:3: driver: does not match", 3, "driver")


# --- placeholders, versions, timeouts, hash -------------------------------------------------------------------------


def test_placeholders_render_and_other_braces_stay(tmp_path: Path) -> None:
    values = _values(tmp_path)
    assert render("--node={node} --bin={bin:kube}", values) == "--node=node-a --bin=/cache/bin/kube"
    assert render('{"limits": {"x": 1}} and { node }', values) == '{"limits": {"x": 1}} and { node }'
    profile = load_profile(_write(tmp_path, VALID))
    assert profile.run is not None
    assert profile.run.process.argv(values)[3:] == [
        "--node=node-a",
        f"--socket={values['socket_path']}",
        "--helper=/cache/bin/kube",
    ]
    assert profile.run.process.environment(values) == {"STATE": f"{values['data_dir']}/state"}


@pytest.mark.parametrize(
    ("template", "problem"),
    [("--node={nodename}", "unknown placeholder {nodename}"), ("--bin={bin:etcd}", "no value for placeholder")],
    ids=["unknown", "no-value"],
)
def test_render_rejects_unknown_and_unset_placeholders(tmp_path: Path, template: str, problem: str) -> None:
    with pytest.raises(UsageError, match=re.escape(problem)):
        render(template, _values(tmp_path))


def test_previous_version_keeps_what_it_does_not_set(tmp_path: Path) -> None:
    text = _changed(
        "identity:", '  versions:\n    previous: {command: ["/opt/old-driver"]}\nhostPaths: [/opt]\nidentity:'
    )
    profile = load_profile(_write(tmp_path, text))
    assert profile.run is not None
    previous = profile.run.versions["previous"]
    assert previous.command == ("/opt/old-driver",)
    assert (previous.args, previous.env) == (profile.run.process.args, profile.run.process.env)


def test_timeouts_scale_by_name_else_by_multiplier(tmp_path: Path) -> None:
    text = _changed("  perName: {driver_ready: 2}", "  multiplier: 1.5\n  perName: {driver_ready: 2}")
    scaled = load_profile(_write(tmp_path, text)).timeouts.apply(Timeouts())
    assert scaled.driver_ready == Timeouts().driver_ready * 2
    assert scaled.pod_scheduled == Timeouts().pod_scheduled * 1.5


def test_defaults_and_hash(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID)
    profile = load_profile(path)
    assert profile.strictness is Strictness.CONTRACT and profile.identity.node_bound_token
    assert profile.capabilities == {Capability.STATUS_DEVICES, Capability.HEALTH_STREAM}
    assert re.fullmatch(r"[0-9a-f]{12}", profile.digest) and profile.digest == profile_hash(path)
    path.write_text(VALID + "version: '2'\n")
    assert profile_hash(path) != profile.digest

"""The scenario catalog: YAML files under fixtures/scenarios/, validated once, yielding typed scenarios.

Objects are written once, in resource.k8s.io/v1 form, with logical names (`gpu`, `shared`); builders give them
unique names, the test's namespace and the driver name. `{driver}` in any string becomes the driver name (CEL
attribute domains need it). A device count may be written relative to the devices of the node the scenario
runs on, `"{devices}"` or `"{devices+1}"`: the reference driver's private instance has `driver.devices`, any other
driver the count its profile declares per node. An unknown key or a bad value is a FixtureError naming the file
and the key path. A `fault` is checked against the reference driver's fault schema (driver.faults.FAULT_SCHEMA,
the vocabulary its control socket accepts), so a typo in a fault fails here rather than when the scenario switches
it on.

A scenario states what it needs of the driver under test (`needs`: devices per node, declared capabilities,
attributes usable in selectors) and, if it only makes sense for the reference driver, why (`referenceOnly`; a
`fault` implies it). Such a scenario runs on the reference driver's private instances (`referenceFaults`) and on
its image as installed (`faultSwitches`), there where the node's devices suit it (`devicesExactly`).
`not_applicable` turns unmet needs into the reason the suites report.

A CEL expression may also name what the profile declares rather than a name of the reference driver's:
`{attribute:<type>}` stands for the first attribute the profile declares with that type (`{attribute:version}`),
`{capacity}` for the first capacity it declares, each as the CEL term that reads it from `device` (a name without a
domain in the driver's). A scenario whose placeholder the profile cannot fill is not applicable; `for_profile`
fills them in and adds such an attribute to what the scenario selects on. A scenario may name the registry
`obligation` its outcome states (`allocation.version-attribute-compares-as-semver`): that obligation judges each
pod's scheduling outcome, before the generic ones.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dra_conformance.driver.faults import FAULT_SCHEMA
from dra_conformance.driver.profile import AttributeType, Capability, DriverProfile
from dra_conformance.errors import FixtureError
from dra_conformance.schema_errors import format_key_path, schema_problem


def _named_one_of(alternatives: dict[str, Any]) -> dict[str, Any]:
    """Schema of an entry with a `name` and exactly one of `alternatives` (key -> schema)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {"name": {"type": "string"}, **alternatives},
        "oneOf": [{"required": [key]} for key in alternatives],
    }


_STRING_LIST = {"type": "array", "items": {"type": "string"}}
# `{attribute:<type>}` and `{capacity}`: CEL terms for what the profile declares (see the module's docstring).
_PROFILE_PLACEHOLDER = re.compile(r"\{(attribute:([a-z]+)|capacity)\}")
CAPACITY_PLACEHOLDER = "capacity"
# "{devices}", "{devices+1}", "{devices-1}": relative to the devices on the scenario's node.
_RELATIVE_COUNT_PATTERN = r"^\{devices([+-][0-9]+)?\}$"
# `minimum` applies to integers only and `pattern` to strings only, so each form gets its own error message.
_COUNT = {"type": ["integer", "string"], "minimum": 1, "pattern": _RELATIVE_COUNT_PATTERN}
_EXPECTED_COUNT = {"type": ["integer", "string"], "minimum": 0, "pattern": _RELATIVE_COUNT_PATTERN}
_SELECTORS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["cel"],
        "properties": {
            "cel": {
                "type": "object",
                "additionalProperties": False,
                "required": ["expression"],
                "properties": {"expression": {"type": "string"}},
            }
        },
    },
}
_TOLERATIONS = {"type": "array", "items": {"type": "object"}}
_SUBREQUEST = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "deviceClassName"],
    "properties": {
        "name": {"type": "string"},
        "deviceClassName": {"type": "string"},
        "selectors": _SELECTORS,
        "allocationMode": {"enum": ["ExactCount", "All"]},
        "count": _COUNT,
        "tolerations": _TOLERATIONS,
    },
}
_EXACT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["deviceClassName"],
    "properties": {
        "deviceClassName": {"type": "string"},
        "selectors": _SELECTORS,
        "allocationMode": {"enum": ["ExactCount", "All"]},
        "count": _COUNT,
        "adminAccess": {"type": "boolean"},
        "tolerations": _TOLERATIONS,
    },
}
_CLAIM_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["devices"],
    "properties": {
        "devices": {
            "type": "object",
            "additionalProperties": False,
            "required": ["requests"],
            "properties": {
                "requests": {
                    "type": "array",
                    "minItems": 1,
                    "items": _named_one_of(
                        {"exactly": _EXACT, "firstAvailable": {"type": "array", "minItems": 1, "items": _SUBREQUEST}}
                    ),
                },
                "constraints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "requests": _STRING_LIST,
                            "matchAttribute": {"type": "string"},
                            "distinctAttribute": {"type": "string"},
                        },
                    },
                },
            },
        }
    },
}
_NAMED_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "spec"],
    "properties": {"name": {"type": "string"}, "spec": _CLAIM_SPEC},
}
_CLAIM_EXPECTATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "devices": _EXPECTED_COUNT,
        "prepare": {"enum": ["ok", "error", "deadline-exceeded"]},
        "error": {"type": "string"},
        "statusDevices": _EXPECTED_COUNT,
        "networkData": {"type": "boolean"},
    },
}
# The PodScheduled reason an unscheduled pod is expected with where its scenario names none.
UNSCHEDULABLE = "Unschedulable"
_POD_EXPECTATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "scheduled": {"type": "boolean"},
        # An unscheduled pod's PodScheduled reason: Unschedulable (no node fits, the default) or SchedulerError (a
        # filter failed, as on a CEL runtime error).
        "condition": {"enum": [UNSCHEDULABLE, "SchedulerError"]},
        "reason": {"type": "string"},
        "ready": {"type": "boolean"},
        "claims": {"type": "object", "additionalProperties": _CLAIM_EXPECTATION},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["scenarios"],
    "properties": {
        "scenarios": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "description", "pods", "expect"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
                    "description": {"type": "string"},
                    "driver": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "profile": {"enum": ["gpu", "nic"]},
                            "devices": {"type": "integer", "minimum": 1, "maximum": 32},
                        },
                    },
                    "needs": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "devices": {"type": "integer", "minimum": 1},
                            # The outcome holds only on a node of exactly this many devices (the only one tainted).
                            "devicesExactly": {"type": "integer", "minimum": 1},
                            "capabilities": {"type": "array", "items": {"enum": [c.value for c in Capability]}},
                            "attributes": {
                                "type": "object",
                                "additionalProperties": {"enum": [t.value for t in AttributeType]},
                            },
                        },
                    },
                    "referenceOnly": {"type": "string", "minLength": 1},
                    # The registry obligation the scenario's outcome states (judges each pod's scheduling outcome).
                    "obligation": {"type": "string", "pattern": "^[a-z]+\\.[a-z0-9][a-z0-9-]*$"},
                    "fault": FAULT_SCHEMA,
                    "prepareDeadline": {"type": "number", "exclusiveMinimum": 0},
                    "recover": {"type": "boolean"},
                    "adminNamespace": {"type": "boolean"},
                    "deviceClasses": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}, "selectors": _SELECTORS},
                        },
                    },
                    "claims": {"type": "array", "items": _NAMED_SPEC},
                    "claimTemplates": {"type": "array", "items": _NAMED_SPEC},
                    "pods": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "claims"],
                            "properties": {
                                "name": {"type": "string"},
                                "claims": {
                                    "type": "array",
                                    "items": _named_one_of(
                                        {"claim": {"type": "string"}, "template": {"type": "string"}}
                                    ),
                                },
                            },
                        },
                    },
                    "expect": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "pods": {"type": "object", "additionalProperties": _POD_EXPECTATION},
                            "exactlyOneScheduled": _STRING_LIST,
                        },
                    },
                },
            },
        }
    },
}


@dataclass(frozen=True)
class Scenario:
    """One scenario: objects to create, an optional driver fault, and the expected outcome per layer."""

    id: str
    description: str
    source: Path
    profile: str = "gpu"
    devices: int = 2
    fault: dict[str, Any] | None = None
    prepare_deadline: float | None = None
    recover: bool = False
    admin_namespace: bool = False
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    claim_templates: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    expect_pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    exactly_one_scheduled: list[str] = field(default_factory=list)
    # What the driver under test must offer for the scenario to apply.
    min_devices: int = 1
    devices_exactly: int | None = None
    capabilities: tuple[Capability, ...] = ()
    attributes: dict[str, AttributeType] = field(default_factory=dict)
    reference_only: str | None = None
    # The registry obligation the outcome states, judged on each pod's scheduling outcome first; None: only the
    # generic ones.
    obligation: str | None = None
    # The profile placeholders its expressions use (`attribute:version`, `capacity`), each standing for a CEL term.
    placeholders: frozenset[str] = frozenset()

    def __str__(self) -> str:
        """The pytest id."""
        return self.id

    def not_applicable(self, profile: DriverProfile) -> str | None:
        """Why the scenario says nothing about the driver of `profile`, or None if it applies."""
        missing = [c.value for c in self.capabilities if not profile.declares(c)]
        if missing:
            return f"scenario {self.id} needs capabilities the profile does not declare: {', '.join(missing)}"
        unfilled = [p for p in sorted(self.placeholders) if _declared(profile, p) is None]
        if unfilled:
            declared = profile.devices.attributes
            return (
                f"scenario {self.id} compares {' and '.join(_wanted(p) for p in unfilled)}, and the profile declares "
                f"none (attributes: {', '.join(f'{n} ({t.value})' for n, t in declared.items()) or 'none'}; "
                f"capacity: {', '.join(profile.devices.capacity) or 'none'})"
            )
        if profile.declares(Capability.REFERENCE_FAULTS):
            return None  # the reference driver runs as a private instance sized by `driver.devices`
        if self.reference_only and not profile.fault_switches:
            return f"scenario {self.id} is for the reference driver only: {self.reference_only}"
        # From here on the scenario runs on the driver the run installed (the reference driver's image too).
        if self.devices_exactly is not None and profile.devices.per_node != self.devices_exactly:
            return (
                f"scenario {self.id} holds only on a node of exactly {self.devices_exactly} devices (for the "
                f"reference driver, a private instance of that size); the profile declares {profile.devices.per_node}"
            )
        if profile.devices.per_node < self.min_devices:
            return (
                f"scenario {self.id} needs {self.min_devices} devices on a node; the profile declares "
                f"{profile.devices.per_node}"
            )
        declared = profile.devices.attributes
        lacking = [f"{name} ({kind.value})" for name, kind in self.attributes.items() if declared.get(name) != kind]
        if lacking:
            return (
                f"scenario {self.id} selects on attributes the profile does not declare: {', '.join(lacking)} "
                f"(declared: {', '.join(f'{n} ({t.value})' for n, t in declared.items()) or 'none'})"
            )
        return None

    def expected(self, pod: str) -> dict[str, Any]:
        """Expectations for one pod (empty if the scenario states none)."""
        return self.expect_pods.get(pod, {})

    def for_profile(self, profile: DriverProfile) -> Scenario:
        """The scenario with its profile placeholders filled in from `profile` (which `not_applicable` accepted).

        Each becomes the CEL term reading the declared name (`{driver}` left for the run to fill in), and an
        attribute it stands for joins the attributes the scenario selects on (checked as published with its type).
        """
        if not self.placeholders:
            return self
        terms: dict[str, str] = {}
        attributes = dict(self.attributes)
        for placeholder in self.placeholders:
            name = _declared(profile, placeholder)
            if name is None:
                raise ValueError(f"scenario {self.id}: {self.not_applicable(profile)}")
            terms[placeholder] = _cel_term("capacity" if placeholder == CAPACITY_PLACEHOLDER else "attributes", name)
            if placeholder != CAPACITY_PLACEHOLDER:
                attributes[name] = profile.devices.attributes[name]

        def fill(value: Any) -> Any:
            if isinstance(value, str):
                return _PROFILE_PLACEHOLDER.sub(lambda match: terms[match.group(1)], value)
            if isinstance(value, list):
                return [fill(item) for item in value]
            if isinstance(value, dict):
                return {key: fill(item) for key, item in value.items()}
            return value

        return dataclasses.replace(
            self,
            device_classes=fill(self.device_classes),
            claims=fill(self.claims),
            claim_templates=fill(self.claim_templates),
            attributes=attributes,
            placeholders=frozenset(),
        )


def _declared(profile: DriverProfile, placeholder: str) -> str | None:
    """The name the profile declares for `placeholder` (its first attribute of the type, its first capacity)."""
    if placeholder == CAPACITY_PLACEHOLDER:
        return next(iter(profile.devices.capacity), None)
    kind = AttributeType(placeholder.removeprefix("attribute:"))
    return next((name for name, declared in profile.devices.attributes.items() if declared == kind), None)


def _wanted(placeholder: str) -> str:
    if placeholder == CAPACITY_PLACEHOLDER:
        return "a device capacity"
    return f"an attribute of type {placeholder.removeprefix('attribute:')}"


def _cel_term(field_name: str, name: str) -> str:
    """`device.<field_name>["<domain>"]["<name>"]`: a declared attribute or capacity as a selector reads it.

    A name without a domain is in the driver's (`{driver}`, which the run fills in). Indexing the domain's map
    reads any declared name, a CEL reserved word too.
    """
    domain, _, bare = name.rpartition("/")
    return f'device.{field_name}["{domain or "{driver}"}"]["{bare}"]'


def _placeholders(path: Path, index: int, raw: dict[str, Any]) -> frozenset[str]:
    """The profile placeholders of a scenario's objects; one of an unknown attribute type is a FixtureError."""
    found: set[str] = set()

    def scan(value: Any) -> None:
        if isinstance(value, str):
            for match in _PROFILE_PLACEHOLDER.finditer(value):
                kind = match.group(2)
                if kind is not None and kind not in {t.value for t in AttributeType}:
                    raise FixtureError(
                        f"{path}: scenarios[{index}]: unknown attribute type in {match.group(0)}; known: "
                        f"{', '.join(t.value for t in AttributeType)}"
                    )
                found.add(match.group(1))
        elif isinstance(value, list):
            for item in value:
                scan(item)
        elif isinstance(value, dict):
            for item in value.values():
                scan(item)

    scan([raw.get("deviceClasses", []), raw.get("claims", []), raw.get("claimTemplates", [])])
    return frozenset(found)


def _check_references(path: Path, index: int, raw: dict[str, Any]) -> None:
    """Cross-references the schema cannot express: names used must be defined."""
    where = f"{path}: scenarios[{index}]"
    classes = {c["name"] for c in raw.get("deviceClasses", [])}
    for kind in ("claims", "claimTemplates"):
        for i, item in enumerate(raw.get(kind, [])):
            for j, request in enumerate(item["spec"]["devices"]["requests"]):
                alternatives = [request["exactly"]] if "exactly" in request else request["firstAvailable"]
                for alternative in alternatives:
                    if alternative["deviceClassName"] not in classes:
                        raise FixtureError(
                            f"{where}.{kind}[{i}].spec.devices.requests[{j}]: unknown deviceClassName "
                            f"{alternative['deviceClassName']!r}; defined: {sorted(classes)}"
                        )
    claims = {c["name"] for c in raw.get("claims", [])}
    templates = {t["name"] for t in raw.get("claimTemplates", [])}
    pods = {p["name"] for p in raw["pods"]}
    for i, pod in enumerate(raw["pods"]):
        for j, use in enumerate(pod["claims"]):
            known, name = (claims, use["claim"]) if "claim" in use else (templates, use["template"])
            if name not in known:
                raise FixtureError(f"{where}.pods[{i}].claims[{j}]: unknown claim or template {name!r}")
    expect = raw["expect"]
    for pod in list(expect.get("pods", {})) + list(expect.get("exactlyOneScheduled", [])):
        if pod not in pods:
            raise FixtureError(f"{where}.expect: unknown pod {pod!r}; defined: {sorted(pods)}")


def load_file(path: Path) -> list[Scenario]:
    """Validate one catalog file and return its scenarios."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise FixtureError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = errors[0]
        steps, problem = schema_problem(first)
        raise FixtureError(f"{path}: {format_key_path(steps)}: {problem}")
    scenarios = []
    for index, item in enumerate(raw["scenarios"]):
        _check_references(path, index, item)
        driver = item.get("driver", {})
        needs = item.get("needs", {})
        reference_only = item.get("referenceOnly") or (
            f"switches the reference driver's fault {item['fault']['mode']}" if item.get("fault") else None
        )
        scenarios.append(
            Scenario(
                id=item["id"],
                description=item["description"],
                source=path,
                profile=driver.get("profile", "gpu"),
                devices=driver.get("devices", 2),
                fault=item.get("fault"),
                prepare_deadline=item.get("prepareDeadline"),
                recover=item.get("recover", False),
                admin_namespace=item.get("adminNamespace", False),
                device_classes=item.get("deviceClasses", []),
                claims=item.get("claims", []),
                claim_templates=item.get("claimTemplates", []),
                pods=item["pods"],
                expect_pods=item["expect"].get("pods", {}),
                exactly_one_scheduled=item["expect"].get("exactlyOneScheduled", []),
                min_devices=needs.get("devices", 1),
                devices_exactly=needs.get("devicesExactly"),
                capabilities=tuple(Capability(c) for c in needs.get("capabilities", [])),
                attributes={name: AttributeType(kind) for name, kind in needs.get("attributes", {}).items()},
                reference_only=reference_only,
                obligation=item.get("obligation"),
                placeholders=_placeholders(path, index, item),
            )
        )
    return scenarios


def load(directory: Path) -> list[Scenario]:
    """Every scenario under `directory` (files in name order); ids must be unique across the catalog."""
    if not directory.is_dir():
        raise FixtureError(f"{directory}: scenario catalog directory not found")
    scenarios: list[Scenario] = []
    seen: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        for scenario in load_file(path):
            if scenario.id in seen:
                raise FixtureError(f"{path}: scenario id {scenario.id!r} already defined in {seen[scenario.id]}")
            seen[scenario.id] = path
            scenarios.append(scenario)
    return scenarios


def select(
    scenarios: Iterable[Scenario], *, needs_prepare: bool = False, own_obligation: bool | None = None
) -> list[Scenario]:
    """Scenarios a suite runs.

    `needs_prepare` keeps those where at least one pod is expected to be scheduled; `own_obligation` those that name
    an obligation of their own (True) or none (False), None either.
    """
    chosen = list(scenarios)
    if needs_prepare:
        chosen = [s for s in chosen if any(s.expected(p["name"]).get("scheduled", True) for p in s.pods)]
    if own_obligation is not None:
        chosen = [s for s in chosen if (s.obligation is not None) == own_obligation]
    return chosen

"""`dra-conformance slices check`: a driver's ResourceSlices run through the scheduler's own allocator, offline.

The pinned `k8s.io/dynamic-resource-allocation` structured allocator (clusters/local/slice-allocator, a small Go
program) is handed each pool of the slices, with no cluster, and asked for every combination of its devices up to
a bound. Each combination is a multiset of device *shapes* (devices that consume the same amounts of counters, or
that share the value of an attribute the caller names), asked for three ways:

- `claim`: one claim with one request per shape (ExactCount);
- `pod`: one claim per device, every claim in one Allocate call (one pod with several claims);
- `pods`: one claim per device, allocated one after another, each seeing the earlier ones as allocated state
  (pods scheduled one after another): the path that must subtract counters consumed by allocations it did not
  make itself.

Before the combinations, each device is asked for alone. Then each answer is judged against the pool as
published, independently of the allocator (`driver.counters.CounterPool`). Each finding names the registry
obligation it rests on:

- `slices.device-names-unique-in-pool`, `partitions.counter-set-names-unique-in-pool`,
  `partitions.counter-references-resolve`, `slices.slice-count-matches-current-generation`: the pool as published
  is one the scheduler refuses (read from the slices; the allocator's own answer is quoted as evidence);
- `partitions.device-consumption-within-its-counter-set`: a device alone consumes more than its counter set holds,
  so no claim can ever get it (the allocator's refusal of it alone is quoted);
- `slices.every-device-allocatable-alone`: a device of a valid pool that the allocator refuses even alone, for a
  reason the counters do not explain;
- `partitions.co-allocated-within-counters`: an allocation the allocator made whose devices together consume more
  of a counter than the set holds (the allocator bug class, or a pool whose counters it reads otherwise);
- `taints.device-allocated-once`: an allocation that holds one device twice though the device does not allow
  multiple allocations.

Taints are tolerated in every request: they are the driver's deliberate signal, not a property of its counters.
Node selection is set aside (every slice is offered on one node): each pool is checked on its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.counters import CounterPool, SearchTooLarge, pools_from_slices
from dra_conformance.errors import UsageError
from dra_conformance.kube.builders import RESOURCE_API

# The domain of the attributes the check adds to every device, so that a CEL selector can name one device or one
# shape (CEL sees no device name). No driver publishes under it.
CHECK_DOMAIN = "slices-check.dra-conformance.io"
# Devices in the largest combination tried by default: every multiset of shapes of 1..8 devices. A pool of three
# shapes gives 164 combinations (times three ways of asking); eight devices cover two GPUs' quarters.
DEFAULT_MAX_DEVICES = 8
# Allocations one run may try (singles and combinations, every way of asking), so that a pool of many shapes
# cannot turn a bound into hours: above it, the run is refused in one line naming a smaller bound.
DEFAULT_MAX_ALLOCATIONS = 20_000
# One Allocate call that answers nothing within this many seconds is reported as a timeout (not a finding): the
# allocator's search of an infeasible combination can backtrack for long on a large pool.
ALLOCATION_TIMEOUT = 5.0
# The whole allocator run (every plan of one pool) may take at most this long before it is abandoned.
RUN_TIMEOUT = 1800.0
# One LIST of the driver's slices, answered from the API server's watch cache.
LIST_TIMEOUT = 10.0
# The allocator features of the pinned release's scheduler with its default feature gates (1.37: partitionable
# devices, consumable capacity, binding conditions beta and on; admin access, prioritized list, taints GA).
FEATURES_1_37 = {
    "AdminAccess": True,
    "PrioritizedList": True,
    "PartitionableDevices": True,
    "DeviceTaints": True,
    "DeviceBindingAndStatus": True,
    "ConsumableCapacity": True,
}
# The ways each combination is asked for (see the module docstring).
MODES = ("claim", "pod", "pods")
# Findings printed per obligation before the rest are counted only.
SHOWN_PER_OBLIGATION = 10


@dataclass(frozen=True)
class Finding:
    """One problem of a pool, and the registry obligation it rests on."""

    obligation: str
    pool: str
    message: str

    def __str__(self) -> str:
        return f"{self.obligation}: pool {self.pool}: {self.message}"


@dataclass(frozen=True)
class Pool:
    """One pool of one driver at its highest generation: its slices as published, and its counters."""

    driver: str
    name: str
    slices: tuple[Mapping[str, Any], ...]
    counters: CounterPool

    @property
    def label(self) -> str:
        """`<driver>/<pool>`, for messages."""
        return f"{self.driver}/{self.name}"

    @property
    def devices(self) -> list[Mapping[str, Any]]:
        """Every device of the pool as published, repeats included, in slice order."""
        return [device for spec in self.specs for device in spec.get("devices") or []]

    @property
    def specs(self) -> list[Mapping[str, Any]]:
        """The slices' specs."""
        return [piece["spec"] for piece in self.slices]

    def device_names(self) -> list[str]:
        """Every device name once, in slice order."""
        return list(dict.fromkeys(str(device["name"]) for device in self.devices))

    def shared(self) -> frozenset[str]:
        """Devices that allow multiple allocations (consumable capacity): exclusivity does not apply to them."""
        return frozenset(str(d["name"]) for d in self.devices if d.get("allowMultipleAllocations") is True)


@dataclass(frozen=True)
class Plan:
    """One thing to ask the allocator: the claims (requests of selector and count) of a combination or a device."""

    id: str
    mode: str  # "joint": every claim in one Allocate call; "sequential": one call per claim
    claims: tuple[tuple[tuple[str, int], ...], ...]
    size: int  # devices asked for in all
    single: str = ""  # the device asked for alone, for the singles

    def document(self) -> dict[str, Any]:
        """The plan as the allocator program reads it."""
        return {
            "id": self.id,
            "mode": self.mode,
            "claims": [[{"selector": s, "count": n} for s, n in claim] for claim in self.claims],
        }


@dataclass
class PoolReport:
    """What the allocator did with one pool, and the findings."""

    pool: Pool
    shapes: dict[str, tuple[str, ...]]
    findings: list[Finding] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # status -> allocations
    combinations: int = 0
    singles: int = 0
    largest_allocated: int = 0
    counters_allow: int | None = None
    allocator_seconds: float = 0.0
    skipped: str = ""  # why the allocator was not asked, when it was not
    allocator_says: str = ""  # the allocator's first error on a pool the published findings make invalid

    def summary(self) -> str:
        """One line: what was tried and what came of it."""
        head = (
            f"pool {self.pool.label}: {len(self.pool.device_names())} devices in {len(self.shapes)} shapes, "
            f"{len(self.pool.counters.counter_sets)} counter sets"
        )
        if self.skipped:
            return f"{head}; allocator not asked: {self.skipped}"
        statuses = ", ".join(f"{count} {status}" for status, count in sorted(self.outcomes.items())) or "none"
        allow = "" if self.counters_allow is None else f" (the counters allow {self.counters_allow})"
        says = f"; the allocator says: {self.allocator_says}" if self.allocator_says else ""
        return (
            f"{head}; tried {self.singles} devices alone and {self.combinations} combinations x {len(MODES)} ways "
            f"({statuses}) in {self.allocator_seconds:.2f}s; largest allocated: {self.largest_allocated} devices"
            f"{allow}{says}"
        )


@dataclass
class CheckReport:
    """The whole check: each pool's report, and totals."""

    source: str
    pools: list[PoolReport]
    seconds: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        """Every finding of every pool."""
        return [finding for pool in self.pools for finding in pool.findings]

    @property
    def allocations(self) -> int:
        """Allocations asked for in all."""
        return sum(sum(pool.outcomes.values()) for pool in self.pools)

    @property
    def combinations(self) -> int:
        """Combinations tried in all (each asked for every way)."""
        return sum(pool.combinations for pool in self.pools)

    def lines(self) -> list[str]:
        """The report as printed: a line per pool, the findings, and one closing line."""
        lines = [f"slices check of {self.source}: {len(self.pools)} pools"]
        lines += [pool.summary() for pool in self.pools]
        by_obligation: dict[str, list[Finding]] = {}
        for finding in self.findings:
            by_obligation.setdefault(finding.obligation, []).append(finding)
        for listed in by_obligation.values():
            lines += [f"FINDING {finding}" for finding in listed[:SHOWN_PER_OBLIGATION]]
            if len(listed) > SHOWN_PER_OBLIGATION:
                lines.append(f"FINDING {listed[0].obligation}: ... and {len(listed) - SHOWN_PER_OBLIGATION} more")
        verdict = f"{len(self.findings)} findings" if self.findings else "no findings"
        lines.append(
            f"{verdict}: {self.combinations} combinations, {self.allocations} allocations asked of the allocator "
            f"in {self.seconds:.2f}s"
        )
        return lines


# --- reading slices -----------------------------------------------------------------------------------------------


def load_slices(path: Path) -> list[dict[str, Any]]:
    """The ResourceSlices in a YAML or JSON file: one slice, a list of them, a `List`, or YAML documents.

    Anything else is a usage error of one line naming the file and what is wrong.
    """
    try:
        text = path.read_text()
    except OSError as error:
        raise UsageError(f"slices file {path}: {error.strerror or error}") from None
    try:
        documents = [document for document in yaml.safe_load_all(text) if document is not None]
    except yaml.YAMLError as error:
        raise UsageError(f"slices file {path}: neither YAML nor JSON ({_one_line(str(error))})") from None
    return validated_slices(_flatten(documents), str(path))


def _flatten(documents: Iterable[Any]) -> list[Any]:
    items: list[Any] = []
    for document in documents:
        if isinstance(document, list):
            items += _flatten(document)
        elif isinstance(document, dict) and isinstance(document.get("items"), list):
            items += _flatten(document["items"])
        else:
            items.append(document)
    return items


def validated_slices(items: Sequence[Any], source: str) -> list[dict[str, Any]]:
    """`items` when every one is a ResourceSlice with a driver and a pool; else a usage error naming the first."""
    if not items:
        raise UsageError(f"{source}: no ResourceSlices in it")
    for index, item in enumerate(items):
        where = f"{source}: item {index}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: a ResourceSlice is a mapping, got {type(item).__name__}")
        kind = item.get("kind", "ResourceSlice")
        if kind != "ResourceSlice":
            raise UsageError(f"{where}: kind {kind}, not ResourceSlice")
        spec = item.get("spec")
        pool = spec.get("pool") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("driver"), str) or not isinstance(pool, dict):
            raise UsageError(f"{where}: spec.driver and spec.pool are required")
        for key in ("name", "generation", "resourceSliceCount"):
            if key not in pool:
                raise UsageError(f"{where}: spec.pool.{key} is required")
        for device in spec.get("devices") or []:
            if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                raise UsageError(f"{where}: every device has a name")
    return [dict(item) for item in items]


def cluster_slices(api: client.ApiClient, driver: str | None, *, where: str) -> list[dict[str, Any]]:
    """The ResourceSlices of a live cluster (of `driver` only, when given), read in one LIST.

    A cluster that does not answer, or refuses, is a usage error of one line naming `where` (its kubeconfig).
    """
    group, version = RESOURCE_API.split("/")
    try:
        listed: dict[str, Any] = client.CustomObjectsApi(api).list_cluster_custom_object(
            group,
            version,
            "resourceslices",
            field_selector=f"spec.driver={driver}" if driver else None,
            _request_timeout=LIST_TIMEOUT,
        )
    except ApiException as error:
        raise UsageError(f"list ResourceSlices of {where}: {error.status} {error.reason}") from None
    except (OSError, urllib3.exceptions.HTTPError) as error:
        raise UsageError(f"list ResourceSlices of {where}: {_one_line(str(error))}") from None
    return validated_slices(listed.get("items") or [], f"the cluster of {where}") if listed.get("items") else []


def pools_of(slices: Iterable[Mapping[str, Any]]) -> list[Pool]:
    """Every pool of every driver, at its highest generation, sorted by driver and pool name."""
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for piece in slices:
        spec = piece["spec"]
        by_pool.setdefault((spec["driver"], spec["pool"]["name"]), []).append(piece)
    pools = []
    for (driver, name), listed in sorted(by_pool.items()):
        generation = max(int(piece["spec"]["pool"]["generation"]) for piece in listed)
        current = tuple(piece for piece in listed if int(piece["spec"]["pool"]["generation"]) == generation)
        try:
            counters = pools_from_slices(piece["spec"] for piece in current)[name]
        except (KeyError, TypeError, ValueError, ArithmeticError) as error:
            raise UsageError(f"pool {driver}/{name}: malformed counters ({_one_line(str(error))})") from None
        pools.append(Pool(driver, name, current, counters))
    return pools


# --- what the pool publishes ----------------------------------------------------------------------------------------


def published_findings(pool: Pool) -> list[Finding]:
    """The findings the published slices show by themselves (the scheduler refuses such a pool or device)."""
    label = pool.label
    counters = pool.counters
    findings = []
    if not counters.complete:
        findings.append(
            Finding(
                "slices.slice-count-matches-current-generation",
                label,
                f"{counters.slices} slices at generation {counters.generation}, "
                f"resourceSliceCount {counters.expected_slices}",
            )
        )
    repeated = sorted(name for name, count in Counter(str(d["name"]) for d in pool.devices).items() if count > 1)
    findings += [Finding("slices.device-names-unique-in-pool", label, f"device {name} repeats") for name in repeated]
    findings += [
        Finding("partitions.counter-set-names-unique-in-pool", label, f"counter set {name} repeats")
        for name in counters.duplicate_sets
    ]
    if not counters.complete:
        return findings  # the missing slices may hold what a reference names: judged once the pool is whole
    findings += [Finding("partitions.counter-references-resolve", label, problem) for problem in counters.unresolved()]
    findings += [
        Finding("partitions.device-consumption-within-its-counter-set", label, problem)
        for problem in counters.devices_beyond_their_sets()
    ]
    return findings


def invalid_for_the_scheduler(findings: Iterable[Finding]) -> bool:
    """Whether these findings make the scheduler treat the whole pool as invalid or incomplete (allocate none)."""
    return any(
        finding.obligation
        in {
            "slices.slice-count-matches-current-generation",
            "slices.device-names-unique-in-pool",
            "partitions.counter-set-names-unique-in-pool",
            "partitions.counter-references-resolve",
        }
        for finding in findings
    )


def shapes_of(pool: Pool, attribute: str | None = None) -> dict[str, tuple[str, ...]]:
    """The pool's devices grouped into shapes, each shape's devices in pool order.

    By default two devices share a shape when they consume the same amounts of counters (whatever the counters'
    and sets' names: the quarters of every GPU are one shape); devices that consume none are one shape. With
    `attribute`, by that attribute's value instead (a device without it is its own "none" shape).
    """
    shapes: dict[str, list[str]] = {}
    seen: set[str] = set()
    for device in pool.devices:
        name = str(device["name"])
        if name in seen:
            continue
        seen.add(name)
        key = _attribute_shape(device, pool.driver, attribute) if attribute else _counter_shape(pool, name)
        shapes.setdefault(key, []).append(name)
    return {key: tuple(names) for key, names in sorted(shapes.items())}


def _counter_shape(pool: Pool, device: str) -> str:
    consumed = pool.counters.consumers.get(device, ())
    if not consumed:
        return "no-counters"
    amounts = sorted(str(value.normalize()) for consumption in consumed for value in consumption.counters.values())
    return f"{len(consumed)}x[{' '.join(amounts)}]"


def _attribute_shape(device: Mapping[str, Any], driver: str, attribute: str) -> str:
    attributes = device.get("attributes") or {}
    value = attributes.get(attribute, attributes.get(f"{driver}/{attribute}"))
    if not isinstance(value, dict) or not value:
        return f"{attribute}=none"
    return f"{attribute}={next(iter(value.values()))}"


# --- what is asked of the allocator ---------------------------------------------------------------------------------


def _selector(key: str, value: str) -> str:
    # A JSON string literal is a CEL string literal for the names and shapes used here.
    return f"device.attributes[{json.dumps(CHECK_DOMAIN)}].{key} == {json.dumps(value)}"


def multisets(shapes: Sequence[str], max_devices: int) -> Iterator[tuple[tuple[str, int], ...]]:
    """Every multiset of `shapes` of 1..max_devices members, as (shape, count) pairs sorted by shape, small first."""
    for size in range(1, max_devices + 1):
        for chosen in itertools.combinations_with_replacement(sorted(shapes), size):
            yield tuple(sorted(Counter(chosen).items()))


def count_multisets(shapes: int, max_devices: int) -> int:
    """How many multisets `multisets` yields: C(shapes + max_devices, shapes) - 1."""
    total = 1
    for i in range(1, shapes + 1):
        total = total * (max_devices + i) // i
    return total - 1 if shapes else 0


def plans_for(shapes: Mapping[str, Sequence[str]], max_devices: int) -> list[Plan]:
    """The singles (each device alone), then every combination of up to `max_devices` devices, asked every way."""
    plans = [
        Plan(f"alone:{device}", "joint", (((_selector("name", device), 1),),), 1, single=device)
        for devices in shapes.values()
        for device in devices
    ]
    for combination in multisets(list(shapes), max_devices):
        label = "+".join(f"{count}x{shape}" for shape, count in combination)
        size = sum(count for _, count in combination)
        one_claim = tuple((_selector("shape", shape), count) for shape, count in combination)
        per_device = tuple(((_selector("shape", shape), 1),) for shape, count in combination for _ in range(count))
        plans += [
            Plan(f"claim:{label}", "joint", (one_claim,), size),
            Plan(f"pod:{label}", "joint", per_device, size),
            Plan(f"pods:{label}", "sequential", per_device, size),
        ]
    return plans


def allocator_slices(pool: Pool, shapes: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The pool's slices as the allocator gets them: on every node, each device carrying its name and shape.

    Only the name of the metadata is kept (the allocator reads none of it, and a live cluster's metadata carries
    fields the program's strict decoding need not know); the specs are kept whole otherwise.
    """
    shape_of = {device: shape for shape, devices in shapes.items() for device in devices}
    prepared: list[dict[str, Any]] = []
    for piece in pool.slices:
        spec = json.loads(json.dumps(piece["spec"]))
        for key in ("nodeName", "nodeSelector", "perDeviceNodeSelection"):
            spec.pop(key, None)
        spec["allNodes"] = True
        for device in spec.get("devices") or []:
            for key in ("nodeName", "nodeSelector", "allNodes"):
                device.pop(key, None)
            attributes = device.setdefault("attributes", {})
            attributes[f"{CHECK_DOMAIN}/name"] = {"string": device["name"]}
            attributes[f"{CHECK_DOMAIN}/shape"] = {"string": shape_of[device["name"]]}
        name = str((piece.get("metadata") or {}).get("name") or f"{pool.name}-{len(prepared)}")
        prepared.append({"apiVersion": RESOURCE_API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec})
    return prepared


# The allocator program: its input document in, its output document out.
Allocator = Callable[[dict[str, Any]], dict[str, Any]]


def program_allocator(binary: Path, timeout: float = RUN_TIMEOUT) -> Allocator:
    """An Allocator that runs the slice-allocator program `binary` (exit 2 and its stderr line: a usage error)."""

    def run(document: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = subprocess.run(
                [str(binary)], input=json.dumps(document), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise UsageError(f"slice-allocator: no answer within {timeout:g}s; lower --max-devices") from None
        if answer.returncode != 0:
            raise UsageError(_one_line(answer.stderr) or f"slice-allocator exited {answer.returncode}")
        result: dict[str, Any] = json.loads(answer.stdout)
        return result

    return run


# --- judging the answers --------------------------------------------------------------------------------------------


def judge(pool: Pool, plans: Sequence[Plan], outcomes: Sequence[Mapping[str, Any]], report: PoolReport) -> None:
    """Count the outcomes and add the findings they show to `report` (see the module docstring)."""
    by_id = {plan.id: plan for plan in plans}
    valid = not invalid_for_the_scheduler(report.findings)
    beyond = {line.split(":", 1)[0].removeprefix("device ") for line in pool.counters.devices_beyond_their_sets()}
    shared = pool.shared()
    first_error = ""
    for outcome in outcomes:
        plan = by_id[outcome["id"]]
        status = str(outcome["status"])
        report.outcomes[status] += 1
        first_error = first_error or str(outcome.get("error") or "")
        if plan.single:
            refused = status in {"unallocatable", "error"}
            if refused and valid and plan.single not in beyond:
                reason = f": {outcome['error']}" if outcome.get("error") else ""
                report.findings.append(
                    Finding(
                        "slices.every-device-allocatable-alone",
                        pool.label,
                        f"device {plan.single}: the allocator refuses it alone, taints tolerated ({status}{reason})",
                    )
                )
        if status != "allocated":
            continue
        devices = [str(d["device"]) for claim in outcome.get("claims") or [] for d in claim]
        report.largest_allocated = max(report.largest_allocated, len(devices))
        twice = sorted(name for name, count in Counter(devices).items() if count > 1 and name not in shared)
        if twice:
            report.findings.append(
                Finding("taints.device-allocated-once", pool.label, f"{plan.id}: allocated {', '.join(twice)} twice")
            )
        overdrawn = pool.counters.overdrawn(sorted(set(devices)))
        if overdrawn:
            report.findings.append(
                Finding(
                    "partitions.co-allocated-within-counters",
                    pool.label,
                    f"{plan.id}: the allocator allocated {', '.join(sorted(devices))}: {'; '.join(overdrawn)}",
                )
            )
    if not valid and first_error:
        report.allocator_says = _one_line(first_error)
    _confirm(report, outcomes, by_id, beyond)


def _confirm(
    report: PoolReport, outcomes: Sequence[Mapping[str, Any]], by_id: Mapping[str, Plan], beyond: set[str]
) -> None:
    """Quote the allocator's answer on each device that the counters alone rule out, as the finding's evidence."""
    refused = {
        by_id[o["id"]].single: str(o["status"])
        for o in outcomes
        if by_id[o["id"]].single in beyond and o["status"] != "allocated"
    }
    report.findings[:] = [
        Finding(f.obligation, f.pool, f"{f.message} (the allocator refuses it alone: {refused[_device_of(f)]})")
        if f.obligation == "partitions.device-consumption-within-its-counter-set" and _device_of(f) in refused
        else f
        for f in report.findings
    ]


def _device_of(finding: Finding) -> str:
    return finding.message.split(":", 1)[0].removeprefix("device ")


def check_pool(
    pool: Pool,
    allocator: Allocator,
    *,
    max_devices: int = DEFAULT_MAX_DEVICES,
    attribute: str | None = None,
    timeout: float = ALLOCATION_TIMEOUT,
) -> PoolReport:
    """Check one pool: its published findings, then every plan the allocator answers, judged."""
    shapes = shapes_of(pool, attribute)
    report = PoolReport(pool, shapes, findings=published_findings(pool))
    if not pool.counters.complete:
        report.skipped = "the pool is incomplete, and the scheduler allocates nothing from an incomplete pool"
        return report
    bound = min(max_devices, len(pool.device_names()))
    plans = plans_for(shapes, bound)
    report.singles = sum(1 for plan in plans if plan.single)
    report.combinations = count_multisets(len(shapes), bound)
    document = {
        "slices": allocator_slices(pool, shapes),
        "features": FEATURES_1_37,
        "timeoutSeconds": timeout,
        "plans": [plan.document() for plan in plans],
    }
    answer = allocator(document)
    report.allocator_seconds = float(answer.get("seconds", 0.0))
    judge(pool, plans, answer["outcomes"], report)
    try:
        # Taints tolerated, as in every request of the check.
        report.counters_allow = len(dataclasses.replace(pool.counters, tainted=frozenset()).largest_co_allocation())
    except SearchTooLarge:  # the summary goes without the figure; the check stands
        report.counters_allow = None
    return report


def check(
    slices: Sequence[Mapping[str, Any]],
    allocator: Allocator,
    *,
    source: str,
    max_devices: int = DEFAULT_MAX_DEVICES,
    max_allocations: int = DEFAULT_MAX_ALLOCATIONS,
    attribute: str | None = None,
    timeout: float = ALLOCATION_TIMEOUT,
) -> CheckReport:
    """Check every pool of `slices`; a bound that would ask more than `max_allocations` is a usage error."""
    if max_devices < 1:
        raise UsageError(f"--max-devices must be at least 1, got {max_devices}")
    pools = pools_of(slices)
    planned = 0
    for pool in pools:
        bound = min(max_devices, len(pool.device_names()))
        planned += len(pool.device_names()) + len(MODES) * count_multisets(len(shapes_of(pool, attribute)), bound)
    if planned > max_allocations:
        raise UsageError(
            f"--max-devices {max_devices} asks {planned} allocations of the allocator, more than --max-allocations "
            f"{max_allocations}; lower --max-devices or group devices by an attribute (--shape-attribute)"
        )
    started = time.monotonic()
    reports = [
        check_pool(pool, allocator, max_devices=max_devices, attribute=attribute, timeout=timeout) for pool in pools
    ]
    return CheckReport(source, reports, time.monotonic() - started)


def _one_line(text: str) -> str:
    return " ".join(text.split())

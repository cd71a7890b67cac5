"""CDI device IDs as the container runtime uses them: defined by the spec files in the node's CDI dir.

The kubelet passes the CDI device IDs a prepare answers to the container runtime, which looks each one up in the CDI
specs of its spec dirs; an ID that no spec defines fails the container's creation ("CDI device injection failed:
unresolvable CDI devices"). Checked where this machine can read the CDI dir the driver was given, and only for IDs the
driver answered (none is a valid answer).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import allocated_devices, check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations

from .cdi_specs import CdiDevice, cdi_dir_of, read_specs, same_kind
from .node_claims import ClaimsOnOneNode
from .published import identifiers, published_devices

pytestmark = pytest.mark.usefixtures("driver_sockets")


def _ids(devices: list[dict[str, Any]]) -> list[str]:
    return [str(cdi) for device in devices for cdi in device["cdiDeviceIDs"]]


def _unresolved(ids: list[str], defined: dict[str, CdiDevice]) -> str:
    """'' if every ID is defined; else which are not, with what the dir defines of their kinds."""
    missing = [cdi for cdi in ids if cdi not in defined]
    if not missing:
        return ""
    kinds = {cdi.split("=", 1)[0]: same_kind(defined, cdi) for cdi in missing}
    return f"not defined by any spec: {missing}; defined of those kinds: {kinds}; {len(defined)} CDI devices in all"


def test_cdi_device_ids_resolve_in_the_cdi_dir_until_their_claim_is_unprepared(
    claims_on_one_node: Callable[..., ClaimsOnOneNode],
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    node, endpoint = next(iter(driver_under_test.endpoints.items()))
    cdi_dir = cdi_dir_of(endpoint)
    claims = claims_on_one_node(2).claims
    ids = {
        claim.ref.uid: _ids(
            check_prepare_answer(
                obligations,
                claim,
                driver_under_test.name,
                kubelet.prepare_outcome(endpoint, [claim.ref]),
                "prepare",
            ).devices
        )
        for claim in claims
    }
    if not any(ids.values()):
        pytest.skip(f"not applicable: {driver_under_test.name} answered no CDI device IDs (none is a valid answer)")
    defined = read_specs(cdi_dir)
    for claim in claims:
        problem = _unresolved(ids[claim.ref.uid], defined)
        obligations.check(
            "protocol.cdi-device-ids-resolve",
            not problem,
            problem,
            f"claim {claim.ref.name} on {node}, CDI dir {cdi_dir}",
        )
    first, second = claims
    check_unprepare(obligations, kubelet, endpoint, first.ref, "protocol.unprepare-succeeds", "unprepare of one claim")
    problem = _unresolved(ids[second.ref.uid], read_specs(cdi_dir))
    obligations.check(
        "protocol.cdi-device-ids-resolve-until-unprepare",
        not problem,
        f"after the unprepare of {first.ref.name}: {problem}",
        f"claim {second.ref.name}, still prepared, on {node}, CDI dir {cdi_dir}",
    )
    check_unprepare(obligations, kubelet, endpoint, second.ref, "protocol.unprepare-succeeds", "unprepare")


def test_a_repeated_prepare_answers_cdi_ids_that_resolve_after_the_claims_specs_were_lost(
    disruption: Disruption,
    allocated_on_disruption_node: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    """A reboot as the driver sees it: its CDI specs gone, its process restarted, its own state on disk kept.

    The kubelet then prepares the claim again and hands the answered IDs to the runtime. The spec files defining the
    claim's CDI devices are removed, the driver is killed and started again, and the claim is prepared again: each ID
    of that answer must be defined in the CDI dir. Files the driver did not write back are restored at the end.
    """
    allocated, endpoint = allocated_on_disruption_node, disruption.endpoint
    cdi_dir = cdi_dir_of(endpoint)
    first = check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    if not _ids(first.devices):
        pytest.skip(f"not applicable: {driver_under_test.name} answered no CDI device IDs (none is a valid answer)")
    defined = read_specs(cdi_dir)
    where = f"claim {allocated.ref.name} on {allocated.node}, CDI dir {cdi_dir}"
    problem = _unresolved(_ids(first.devices), defined)
    obligations.check("protocol.cdi-device-ids-resolve", not problem, problem, where)
    lost = _remove_defining(cdi_dir, _ids(first.devices), defined)
    try:
        with allure.step(f"reboot as the driver sees it: {sorted(lost)} removed, the driver killed and started again"):
            disruption.kill()
            disruption.start()  # waits until it registered again with a complete pool
        again = check_prepare_answer(
            obligations,
            allocated,
            driver_under_test.name,
            kubelet.prepare_outcome(endpoint, [allocated.ref]),
            "repeated prepare after the reboot",
        )
        problem = _unresolved(_ids(again.devices), read_specs(cdi_dir))
        obligations.check(
            "protocol.repeated-prepare-cdi-ids-resolve-after-specs-lost",
            not problem,
            f"after removing {sorted(lost)}, restarting the driver and preparing again: {problem}",
            where,
        )
    finally:
        for path, content in lost.items():
            restored = cdi_dir / path
            if not restored.exists():
                restored.write_bytes(content)
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")


def _remove_defining(cdi_dir: Path, ids: list[str], defined: dict[str, CdiDevice]) -> dict[str, bytes]:
    """Remove the spec files that define any of `ids`, as a reboot empties the CDI dir; returns name -> content."""
    removed = {}
    for name in sorted({defined[cdi].spec_file for cdi in ids if cdi in defined}):
        path = cdi_dir / name
        try:
            removed[name] = path.read_bytes()
            path.unlink()
        except FileNotFoundError:  # removed meanwhile
            continue
    return removed


def test_cdi_spec_edits_set_up_the_device_the_prepare_reports(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    cdi_dir = cdi_dir_of(endpoint)
    driver = driver_under_test.name
    answer = check_prepare_answer(
        obligations, allocated, driver, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    defined = read_specs(cdi_dir)
    pools = {
        pool: identifiers(devices) for pool, devices in published_devices(api_client, driver, allocated.node).items()
    }
    allocated_here = set(allocated_devices(allocated, driver))
    compared = []
    for device in answer.devices:
        pool, name = device["poolName"], device["deviceName"]
        words = set().union(*(defined[cdi].words() for cdi in device["cdiDeviceIDs"] if cdi in defined))
        named = {(pool, other) for other, names in pools.get(pool, {}).items() if names & words}
        if not named:
            continue  # the edits name no device of the pool: nothing to compare
        compared.append(name)
        obligations.check(
            "protocol.cdi-edits-set-up-the-allocated-device",
            (pool, name) in named and named <= allocated_here,
            f"the edits of {device['cdiDeviceIDs']} name {sorted(named)}; reported {pool}/{name}, the claim was "
            f"allocated {sorted(allocated_here)}",
            f"claim {allocated.ref.name} on {allocated.node}, CDI dir {cdi_dir}",
        )
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")
    if not compared:
        pytest.skip(
            "not applicable: the container edits of the CDI devices answered name no published device (by its name "
            f"or an attribute value only it has): {[d['cdiDeviceIDs'] for d in answer.devices]}"
        )

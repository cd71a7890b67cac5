"""Whether the driver under test can take part in a check: a skip, as not applicable, where it cannot.

Checks that need the reference driver's fault switches or private instances of its program say so here; the
suites call these at the start of such a check, the plugin's `private_driver` fixture before it starts one.
"""

from __future__ import annotations

import pytest

from dra_conformance.driver.profile import Capability, DriverProfile


def require_fault_switches(profile: DriverProfile, purpose: str) -> None:
    """Skip as not applicable unless the driver under test answers the reference driver's fault switches.

    They are the reference driver's (`referenceFaults`, or `faultSwitches` for its installed image): the check
    needs them to make the driver do what it is then judged on.
    """
    if not profile.fault_switches:
        pytest.skip(
            f"not applicable: {purpose} needs the reference driver's fault switches; the driver under test is "
            f"{profile.driver} ({profile.source} declares neither {Capability.REFERENCE_FAULTS} nor "
            f"{Capability.FAULT_SWITCHES})"
        )


def require_private_instances(profile: DriverProfile, purpose: str) -> None:
    """Skip as not applicable unless the suite may start the driver's program itself (`referenceFaults`).

    What such a check shows is the reference driver's own behaviour, nothing about another driver, nor about the
    reference driver's image installed as shipped (`faultSwitches`), whose program the suite does not start.
    """
    if not profile.declares(Capability.REFERENCE_FAULTS):
        pytest.skip(
            f"not applicable: {purpose} needs private instances of the reference driver's program; the driver "
            f"under test is {profile.driver} ({profile.source} declares no {Capability.REFERENCE_FAULTS})"
        )

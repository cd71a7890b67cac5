"""Broken modes: realistic vendor bugs the reference driver can be started with.

Each mode is a mutant of the driver: a conformance check that is worth its name fails against it. Unlike faults
(switched at run time through the control socket, for the harness's own scenarios), a broken mode is chosen at
start (`--broken-mode`), so a driver profile can run the broken driver like any vendor binary.
"""

from __future__ import annotations

from enum import StrEnum


class BrokenMode(StrEnum):
    """One bug, named for what the driver gets wrong."""

    # A repeated prepare of the same claim is refused ("already prepared") instead of answered again.
    NON_IDEMPOTENT_PREPARE = "non-idempotent-prepare"
    # Unprepare of a claim it does not know (never prepared here, or already unprepared) is an error.
    UNPREPARE_UNKNOWN_FAILS = "unprepare-unknown-fails"
    # Unprepare reads the claim from the API first and fails once the claim is deleted.
    UNPREPARE_NEEDS_CLAIM = "unprepare-needs-claim"
    # Remembers unprepared claims and refuses to prepare them again.
    PREPARE_AFTER_UNPREPARE_FAILS = "prepare-after-unprepare-fails"
    # Does not check the claim's node: prepares (and writes CDI specs for) claims allocated to other nodes.
    PREPARES_FOREIGN_CLAIMS = "prepares-foreign-claims"
    # Reports a prepare successful although its status.devices write failed (the write is neither retried nor
    # reported).
    IGNORES_STATUS_WRITE_FAILURE = "ignores-status-write-failure"
    # Keeps prepared claims in memory only: after a restart it has forgotten them, and their CDI specs leak.
    LOSES_STATE_ON_RESTART = "loses-state-on-restart"
    # Started on a state file a newer release wrote (a downgrade), it publishes no pool at all.
    DROPS_POOL_AFTER_DOWNGRADE = "drops-pool-after-downgrade"

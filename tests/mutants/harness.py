"""The mutation harness: run the bundled suites against a broken reference driver and read which checks failed.

A mutant is one realistic vendor bug: a broken mode of the reference driver (`tests.mutants.broken_modes`, started
with `--broken-mode`), or a broken RBAC manifest the driver ships. Each runs as the driver under test from a copy
of the reference driver's profile, like a vendor's binary, on a local cluster: a private one, or one that mutants
run one after another share, each swapping its driver in (`--replace-driver`: a fresh driver, the control plane
kept). The check named for it must
fail; a mutant no check kills means the suite proves nothing about that bug.

Used by tests/mutants (one test per mutant) and bench/mutants (the table and the score).
"""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_conformance import paths
from dra_conformance.driver import confinement
from tests.mutants.broken_modes import BrokenMode
from tests.reference_image import build_reference_image
from tests.shared_cluster import swap_in

# Cluster start (~15 s), the checks, and the cluster's stop, with room for a busy CI machine.
MUTANT_RUN_DEADLINE = 600.0
# `dra-conformance run` exits with this when tests failed (and ran): anything else is no verdict.
EXIT_TESTS_FAILED = 1
# What a mutant run reports when its driver did not even start on the shared cluster (no run, no verdict).
EXIT_NO_START = -1
# Fake nodes of a mutant's cluster: two, so that node-local checks have another node to compare with.
MUTANT_NODES = 2
# Kept of a run's output for failure messages.
OUTPUT_TAIL = 3000

# The as-shipped profile the shipped mutants copy.
SHIPPED_PROFILE = "reference-driver-shipped.yaml"

DOWNGRADE_CHECK = "test_driver_upgraded_and_downgraded_with_claims_in_flight_keeps_pools_current_and_claims_known"


def arbitrary_node_rbac(source: Path, directory: Path) -> Path:
    """The profile's RBAC with `arbitrary-node:patch` added to the driver's status rule: writes for every node."""
    documents = [document for document in yaml.safe_load_all(source.read_text()) if document]
    for document in documents:
        rules = document.get("rules") or [] if document["kind"] == "ClusterRole" else []
        for rule in rules:
            if "resourceclaims/driver" in rule.get("resources", []):
                rule["verbs"] = [*rule["verbs"], "arbitrary-node:patch"]
    path = directory / f"arbitrary-node-{source.name}"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


@dataclass(frozen=True)
class Mutant:
    """One bug the driver under test is started with, the obligation it breaks, and the check that must catch it."""

    name: str
    # The test id (of the bundled suites) that must fail against this mutant.
    killed_by: str
    # The registry obligation the bug breaks, which the named check states: its basis decides the strictness under
    # which the whole suite must refuse the bug (contract: any profile's; defensive: strict only).
    breaks: str
    # Broken modes the driver is started with.
    modes: tuple[BrokenMode, ...] = ()
    # Rewrites one RBAC manifest of the profile (source, output dir -> new file); None ships it as it is.
    rbac: Callable[[Path, Path], Path] | None = None
    # Further driver arguments, after the profile's (the last of a repeated option wins): e.g. the device profile
    # whose bug the mutant is.
    args: tuple[str, ...] = ()
    # Runs the reference driver as shipped (its image and DaemonSet, fixtures/profiles/reference-driver-shipped.yaml)
    # on the local cluster's real node, the broken modes added to the DaemonSet's arguments.
    shipped: bool = False
    # Real nodes of a shipped mutant's cluster: one, but for a check that stops the driver on a real node of its own
    # (the `disruption` fixture takes the last of two or more).
    real_nodes: int = 1
    # Run by CI's mutant tests (tests/mutants); False for an as-shipped copy of a bug CI already kills on kwok nodes
    # whose check CI runs anyway, which bench/mutants still runs: the real-node lane is CI's longest.
    in_ci: bool = True

    def __str__(self) -> str:
        """The pytest id and the table's row name."""
        return self.name


def _driver_mutant(mode: BrokenMode, killed_by: str, breaks: str) -> Mutant:
    return Mutant(str(mode), killed_by, breaks, modes=(mode,))


FOREIGN_NODE_CHECK = "test_claim_of_another_node_is_refused_without_node_local_work"
IDEMPOTENCE_CHECK = "test_prepare_and_unprepare_are_idempotent[v1]"
BATCH_CHECK = "test_claims_prepared_and_unprepared_in_one_call_are_each_handled"
CDI_RESOLVE_CHECK = "test_cdi_device_ids_resolve_in_the_cdi_dir_until_their_claim_is_unprepared"
FAILED_RELEASE_CHECK = "test_a_release_that_cannot_start_leaves_the_old_instance_serving_until_its_template_is_put_back"
UPGRADE_CHECK = (
    "test_an_upgrade_from_the_previous_release_and_its_rollback_keep_claims_prepared_and_unchanged_slices_untouched"
)
DOWNTIME_CHECK = "test_a_restart_after_sigterm_keeps_the_pool_complete_and_its_generation_and_removes_the_sockets"

# Grouped by the class of obligation they break (the field coverage table's groups, docs/obligations.md).
MUTANTS: tuple[Mutant, ...] = (
    # Registration and GetInfo.
    _driver_mutant(
        BrokenMode.REGISTERS_PRODUCT_NAME,
        "test_registration_names_the_driver_and_a_service_the_kubelet_accepts",
        "protocol.registration-name-is-driver-name",
    ),
    # NodePrepareResources answers.
    _driver_mutant(BrokenMode.PREPARES_WRONG_DEVICE, IDEMPOTENCE_CHECK, "protocol.reported-devices-are-allocated"),
    _driver_mutant(BrokenMode.NON_IDEMPOTENT_PREPARE, IDEMPOTENCE_CHECK, "protocol.valid-claim-prepares"),
    _driver_mutant(
        BrokenMode.PREPARE_AFTER_UNPREPARE_FAILS,
        "test_prepare_after_unprepare_gets_the_allocated_devices_again",
        "protocol.valid-claim-prepares",
    ),
    _driver_mutant(
        BrokenMode.REPORTS_UNKNOWN_CLAIM_PREPARED,
        "test_unknown_claim_is_never_reported_prepared",
        "protocol.unknown-claim-not-prepared",
    ),
    _driver_mutant(
        BrokenMode.BATCH_ANSWERS_SWAPPED, BATCH_CHECK, "protocol.batch-answer-reports-its-own-claims-devices"
    ),
    _driver_mutant(
        BrokenMode.PREPARES_FOREIGN_CLAIMS, FOREIGN_NODE_CHECK, "protocol.foreign-node-claim-no-node-local-work"
    ),
    # Issue 43's held-out classes, each with its named check (issue 44): a multi-request claim's devices all answered
    # under the first request's name.
    _driver_mutant(
        BrokenMode.ANSWERS_UNDER_FIRST_REQUEST,
        "test_each_device_of_a_multi_request_claim_is_answered_under_its_own_request",
        "protocol.answer-request-names-match-allocation",
    ),
    # NodeUnprepareResources answers.
    _driver_mutant(
        BrokenMode.UNPREPARE_UNKNOWN_FAILS,
        "test_unprepare_of_a_claim_never_prepared_succeeds",
        "protocol.unprepare-of-unprepared-claim-succeeds",
    ),
    _driver_mutant(
        BrokenMode.UNPREPARE_NEEDS_CLAIM,
        "test_unprepare_of_a_deleted_claim_succeeds",
        "protocol.unprepare-of-deleted-claim-succeeds",
    ),
    _driver_mutant(BrokenMode.UNPREPARE_HANDLES_ONLY_FIRST, BATCH_CHECK, "protocol.batch-unprepare-undoes-every-claim"),
    # Issue 43's held-out class: the record of prepared claims written outside its lock loses concurrent changes,
    # which a restart shows.
    _driver_mutant(
        BrokenMode.CHECKPOINT_WRITTEN_OUTSIDE_LOCK,
        "test_claims_prepared_and_unprepared_concurrently_are_known_as_such_after_a_restart",
        "protocol.restart-after-concurrent-changes-knows-prepared-claims",
    ),
    # A build that loses its prepared claims when its process goes: the rollback check's version changes restart it.
    _driver_mutant(BrokenMode.LOSES_STATE_ON_RESTART, DOWNGRADE_CHECK, "rollback.prepared-state-kept-across-versions"),
    # CDI specs.
    _driver_mutant(
        BrokenMode.UNPREPARE_LEAVES_CDI_SPECS,
        "test_unprepare_removes_the_cdi_specs_prepare_wrote",
        "protocol.unprepare-removes-cdi-specs",
    ),
    _driver_mutant(BrokenMode.CDI_ID_UNRESOLVABLE, CDI_RESOLVE_CHECK, "protocol.cdi-device-ids-resolve"),
    _driver_mutant(
        BrokenMode.UNPREPARE_REMOVES_OTHER_CLAIMS_CDI,
        CDI_RESOLVE_CHECK,
        "protocol.cdi-device-ids-resolve-until-unprepare",
    ),
    # Lost CDI specs (issue 44): a repeated prepare after a reboot emptied the CDI dir answers IDs no spec defines.
    _driver_mutant(
        BrokenMode.REPLAYED_PREPARE_SKIPS_CDI_SPECS,
        "test_a_repeated_prepare_answers_cdi_ids_that_resolve_after_the_claims_specs_were_lost",
        "protocol.repeated-prepare-cdi-ids-resolve-after-specs-lost",
    ),
    # Opaque config (issue 44): the class's config applied over the claim's (its config API,
    # drivers/fake-dra-go/opaque.go), passed as an argument.
    Mutant(
        "class-config-over-claim-config",
        "test_a_claim_config_overrides_the_class_config_it_contradicts",
        "protocol.opaque-claim-config-overrides-class-config",
        args=("--broken-mode=class-config-over-claim-config",),
    ),
    _driver_mutant(
        BrokenMode.CDI_EDITS_NAME_OTHER_DEVICE,
        "test_cdi_spec_edits_set_up_the_device_the_prepare_reports",
        "protocol.cdi-edits-set-up-the-allocated-device",
    ),
    # ResourceSlices and pools.
    _driver_mutant(
        BrokenMode.PUBLISHES_FOR_WRONG_NODE,
        "test_driver_binds_its_slices_only_to_nodes_that_exist",
        "protocol.slices-bound-to-existing-nodes",
    ),
    _driver_mutant(
        BrokenMode.REPUBLISHES_SAME_GENERATION,
        "test_every_change_of_a_pools_devices_comes_with_a_new_generation",
        "protocol.pool-content-change-changes-generation",
    ),
    _driver_mutant(
        BrokenMode.DROPS_POOL_AFTER_DOWNGRADE, DOWNGRADE_CHECK, "rollback.build-comes-up-with-a-complete-pool"
    ),
    # Slice hygiene (suites/slices).
    _driver_mutant(
        BrokenMode.REPUBLISH_LEAVES_INCOMPLETE_POOL,
        "test_pool_stays_complete_and_drops_older_generations_while_the_driver_republishes",
        "slices.pool-stays-complete-during-republish",
    ),
    # Issue 43's held-out class: a republish (a rescan) changes an attribute's type with no new driver version.
    _driver_mutant(
        BrokenMode.REPUBLISH_CHANGES_ATTRIBUTE_TYPE,
        "test_device_attributes_keep_their_names_and_types_across_republishes",
        "slices.attribute-names-and-types-stable",
    ),
    # Downtime (issue 44, items 4 and 5) and issue 43's held-out class, modes of the Go build only
    # (drivers/fake-dra-go/downtime.go), passed as arguments: on SIGTERM the driver deletes its slices and starts again
    # from generation 1; or it starts again from generation 1 under new slice names beside the old run's; or it quits
    # at once, leaving its sockets; or every start rewrites its unchanged slices at a new generation. Each breaks one
    # of the obligations the one SIGTERM restart of suites/slices/test_downtime.py judges, the first it judges of
    # those broken (the slices rewritten by the first two also break the last, judged after them).
    Mutant(
        "deletes-slices-on-sigterm",
        DOWNTIME_CHECK,
        "slices.short-restart-keeps-pool-complete",
        args=("--broken-mode=deletes-slices-on-sigterm",),
    ),
    Mutant(
        "restarts-generation-beside-old-slices",
        DOWNTIME_CHECK,
        "slices.restart-generation-not-behind-old-slices",
        args=("--broken-mode=restarts-generation-beside-old-slices",),
    ),
    Mutant(
        "leaves-sockets-on-sigterm",
        DOWNTIME_CHECK,
        "kubelet.sigterm-removes-sockets",
        args=("--broken-mode=leaves-sockets-on-sigterm",),
    ),
    Mutant(
        "rewrites-slices-on-restart",
        DOWNTIME_CHECK,
        "slices.unchanged-restart-leaves-slices-untouched",
        args=("--broken-mode=rewrites-slices-on-restart",),
    ),
    # Selectors (issue 44, item 7): the version attribute the profile declares published as a string; the class that
    # selects devices of at least the lowest version gets none (the selector errors on each).
    _driver_mutant(
        BrokenMode.PUBLISHES_VERSION_AS_STRING,
        "test_a_selector_comparing_a_declared_version_as_semver_or_a_declared_capacity_as_quantity_matches_by_its_type"
        "[selector-version-at-least-lowest]",
        "allocation.version-attribute-compares-as-semver",
    ),
    _driver_mutant(
        BrokenMode.DUPLICATE_DEVICE_NAMES,
        "test_device_names_are_unique_within_each_pool_across_its_slices",
        "slices.device-names-unique-in-pool",
    ),
    # Health stream.
    _driver_mutant(
        BrokenMode.HEALTH_WRONG_POOL,
        "test_declared_health_stream_reports_published_devices_within_the_kubelet_window",
        "protocol.health-reports-name-published-devices",
    ),
    _driver_mutant(
        BrokenMode.HEALTHY_WHILE_FAILING,
        "test_health_stream_does_not_report_healthy_a_device_its_own_slice_taints",
        "protocol.tainted-device-not-reported-healthy",
    ),
    # status.devices.
    _driver_mutant(
        BrokenMode.OMITS_DECLARED_STATUS,
        "test_declared_status_devices_follow_prepare_and_unprepare",
        "protocol.declared-status-written",
    ),
    _driver_mutant(
        BrokenMode.READY_BEFORE_PREPARED,
        "test_a_failed_prepare_leaves_no_ready_status",
        "protocol.failed-prepare-leaves-no-ready-status",
    ),
    _driver_mutant(
        BrokenMode.IGNORES_STATUS_WRITE_FAILURE,
        "test_driver_keeps_its_slices_and_its_declared_status_through_api_faults",
        "protocol.declared-status-survives-api-faults",
    ),
    # Issue 43's held-out classes: status entries for the other driver's devices of a mixed claim; a status write a
    # few seconds after prepare, also after the unprepare.
    _driver_mutant(
        BrokenMode.STATUS_FOR_OTHER_DRIVERS_DEVICES,
        "test_a_claim_mixing_two_drivers_gets_status_entries_only_for_the_drivers_own_devices",
        "protocol.status-entries-only-for-own-devices",
    ),
    _driver_mutant(
        BrokenMode.REWRITES_STATUS_AFTER_PREPARE,
        "test_no_status_write_by_the_driver_follows_its_unprepare",
        "protocol.no-status-write-after-unprepare",
    ),
    _driver_mutant(
        BrokenMode.WRITES_STATUS_FOR_FOREIGN_CLAIMS,
        FOREIGN_NODE_CHECK,
        "protocol.foreign-node-claim-no-node-local-work",
    ),
    # A NIC driver's bug: the reference driver runs its nic device profile (the default profile's devices are GPUs,
    # which carry no networkData).
    Mutant(
        str(BrokenMode.NETWORK_DATA_MISMATCH),
        "test_declared_network_data_names_what_the_slice_publishes_for_the_device",
        "protocol.network-data-agrees-with-slice",
        modes=(BrokenMode.NETWORK_DATA_MISMATCH,),
        args=("--profile=nic",),
    ),
    # A shared-device driver's bug: the capacity checks start private instances of the gpu-shared device profile,
    # which carry the profile's --broken-mode like every private instance of the driver under test.
    Mutant(
        str(BrokenMode.PREPARE_IGNORES_SHARE_ID),
        "test_each_share_is_prepared_with_its_share_id_and_unprepared_alone",
        "capacity.unprepare-of-one-share-keeps-the-others",
        modes=(BrokenMode.PREPARE_IGNORES_SHARE_ID,),
    ),
    # Partitionable devices: the check starts the reference driver's gpu-partitions device profile itself, and the
    # instance inherits the profile's --broken-mode (the run's own gpu devices have no counters for it to break).
    _driver_mutant(
        BrokenMode.PARTITIONS_OVERSUBSCRIBE_COUNTERS,
        "test_every_counter_consumption_resolves_within_its_pool_and_fits_its_counter_set",
        "partitions.device-consumption-within-its-counter-set",
    ),
    # binding (issue 22): the attach controller of the gpu-fabric profile (which the binding checks start) announces
    # the device attached before its attach step ran.
    _driver_mutant(
        BrokenMode.BINDING_CONDITIONS_BEFORE_ATTACH,
        "test_pod_is_bound_only_after_every_binding_condition_is_true_as_written_by_the_named_identity",
        "binding.conditions-true-only-after-attach",
    ),
    # The driver as shipped, on the real node (issue 23): a new instance of a rolling update removes the old one's
    # sockets.
    Mutant(
        str(BrokenMode.REMOVES_OTHER_INSTANCES_SOCKETS),
        "test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance",
        "kubelet.rolling-update-leaves-other-instances-sockets",
        modes=(BrokenMode.REMOVES_OTHER_INSTANCES_SOCKETS,),
        shipped=True,
    ),
    # The driver as shipped, on the real node (issue 43's held-out class): the new instance of a rolling update
    # registers through the old one's socket file name.
    Mutant(
        str(BrokenMode.REUSES_REGISTRATION_SOCKET_NAME),
        "test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance",
        "kubelet.rolling-update-instances-registered-side-by-side",
        modes=(BrokenMode.REUSES_REGISTRATION_SOCKET_NAME,),
        shipped=True,
    ),
    # The RBAC the driver ships.
    Mutant(
        "rbac-arbitrary-node",
        "test_driver_rbac_grants_nothing_beyond_its_declared_capabilities",
        "rbac.shipped-rbac-within-declared-capabilities",
        rbac=arbitrary_node_rbac,
    ),
    # Health over time (issue 44, item 6): a health version advertised in GetInfo and not served.
    _driver_mutant(
        BrokenMode.HEALTH_V1ALPHA1_UNSERVED,
        "test_every_advertised_health_version_streams_the_same_devices",
        "protocol.every-advertised-health-version-answers",
    ),
    # Health over time (issue 44, item 6), the driver as shipped on a real node of its own: after a stop and start its
    # health stream leaves out the running pod's device, which stays Unknown in the pod's status.
    Mutant(
        str(BrokenMode.HEALTH_LOST_FOR_RESTORED_CLAIMS),
        "test_pod_health_reads_unknown_while_the_driver_is_stopped_and_healthy_once_it_runs_again",
        "kubelet.pod-health-healthy-after-driver-restart",
        modes=(BrokenMode.HEALTH_LOST_FOR_RESTORED_CLAIMS,),
        shipped=True,
        real_nodes=2,
    ),
    # Downtime (issue 44, item 5), the driver as shipped on a real node of its own: a build that forgets what it
    # prepared when its process goes answers the kubelet's retried unprepare of a pod force-deleted while it was down
    # as done, and leaves the claim's CDI spec behind.
    Mutant(
        f"{BrokenMode.LOSES_STATE_ON_RESTART}-as-shipped",
        "test_a_pod_force_deleted_while_the_driver_is_down_has_its_claim_unprepared_once_the_driver_is_back",
        "kubelet.force-deleted-pod-claim-unprepared-after-driver-returns",
        modes=(BrokenMode.LOSES_STATE_ON_RESTART,),
        shipped=True,
        real_nodes=2,
    ),
    # Upgrades (issue 44, item 4), the driver as shipped: a release that cannot start deletes the node's pool on its
    # way out, while the old instance still serves; once the rollout is undone, a new pod's claim finds no device.
    Mutant(
        f"{BrokenMode.FAILED_START_DELETES_POOL}-as-shipped",
        FAILED_RELEASE_CHECK,
        "kubelet.failed-release-rolled-back-serves",
        modes=(BrokenMode.FAILED_START_DELETES_POOL,),
        shipped=True,
    ),
    # Upgrades (issue 44, item 4), the driver as shipped: its previous release, started on the state the installed
    # one wrote (the upgrade check's first switch), gives up its pool; the pods started across the switch stay pending.
    # The one run of the upgrade check in CI (no profile CI certifies names a previous release).
    Mutant(
        f"{BrokenMode.DROPS_POOL_AFTER_DOWNGRADE}-as-shipped",
        UPGRADE_CHECK,
        "kubelet.upgrade-and-rollback-keep-claims-prepared",
        modes=(BrokenMode.DROPS_POOL_AFTER_DOWNGRADE,),
        shipped=True,
    ),
    # Upgrades (issue 44, item 4), the driver as shipped: every start rewrites its unchanged slices at a new
    # generation, so each rollout of the same release churns them.
    Mutant(
        "rewrites-slices-on-restart-as-shipped",
        "test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance",
        "kubelet.rollout-leaves-unchanged-slices-untouched",
        args=("--broken-mode=rewrites-slices-on-restart",),
        shipped=True,
        in_ci=False,
    ),
    # Health over time (issue 44, item 6): a device failed through the profile's health hook reported UNHEALTHY with
    # an empty message.
    _driver_mutant(
        BrokenMode.UNHEALTHY_WITHOUT_MESSAGE,
        "test_a_device_made_unhealthy_through_the_profile_hook_is_reported_unhealthy_with_a_message",
        "protocol.unhealthy-report-carries-message",
    ),
    # Two drivers in one pod, one failing (issue 44, item 7): the claim prepared on each of the kubelet's tries is
    # unprepared once when the pod ends, and the driver keeps it for the prepares it counted.
    _driver_mutant(
        BrokenMode.COUNTS_PREPARES_PER_CLAIM,
        "test_a_claim_whose_pod_failed_on_another_drivers_prepare_is_left_with_nothing_once_the_pod_ends",
        "protocol.partial-prepare-leaves-no-state",
    ),
)


def mutant(name: str) -> Mutant:
    """The mutant called `name`."""
    return next(m for m in MUTANTS if m.name == name)


def shipped_mutant_profile(chosen: Mutant, directory: Path) -> Path:
    """The as-shipped profile, `chosen`'s modes added to its DaemonSet's arguments, its image built in `directory`."""
    source = paths.fixtures_dir() / "profiles" / SHIPPED_PROFILE
    profile: dict[str, Any] = yaml.safe_load(source.read_text())
    install = profile["install"]

    def broken(relative: str, release: str) -> str:
        manifest = (source.parent / relative).resolve()
        if manifest.name != "daemonset.yaml":
            return str(manifest)
        daemonset = yaml.safe_load(manifest.read_text())
        container = daemonset["spec"]["template"]["spec"]["containers"][0]
        container["args"] += [*(f"--broken-mode={mode}" for mode in chosen.modes), *chosen.args]
        written = directory / f"{chosen.name}-{release}daemonset.yaml"
        written.write_text(yaml.safe_dump(daemonset, sort_keys=False))
        return str(written)

    install["manifests"] = [broken(relative, "") for relative in install["manifests"]]
    if "previous" in install:  # the release before runs with the same bugs (a downgrade's are the older release's)
        install["previous"]["manifests"] = [broken(r, "previous-") for r in install["previous"]["manifests"]]
    image = directory / "reference-driver.tar"
    failed = build_reference_image(image)
    if failed is not None:
        raise RuntimeError(f"image build for mutant {chosen}: {failed}")
    install["images"] = [str(image)]
    profile["identity"]["rbac"] = [str((source.parent / path).resolve()) for path in profile["identity"]["rbac"]]
    profile["hostPaths"] = confinement.host_paths_of_copy(profile, source.parent)
    path = directory / f"{chosen.name}.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def mutant_profile(chosen: Mutant, directory: Path, base: Path | None = None) -> Path:
    """The reference driver's profile, broken as `chosen` says; its RBAC paths made absolute for the copy.

    `base`: the profile to break (default the reference driver's).
    """
    if chosen.shipped:
        return shipped_mutant_profile(chosen, directory)
    source = base or paths.reference_driver_profile()
    profile: dict[str, Any] = yaml.safe_load(source.read_text())
    for build in [profile["run"], *profile["run"].get("versions", {}).values()]:
        if "args" in build:
            build["args"] += [*(f"--broken-mode={mode}" for mode in chosen.modes), *chosen.args]
    rbac = [(source.parent / path).resolve() for path in profile["identity"]["rbac"]]
    if chosen.rbac is not None:
        rbac = [chosen.rbac(path, directory) for path in rbac]
    profile["identity"]["rbac"] = [str(path) for path in rbac]
    controller = profile["identity"].get("controller") or {}
    if "rbac" in controller:
        controller["rbac"] = [str((source.parent / path).resolve()) for path in controller["rbac"]]
    profile["hostPaths"] = confinement.host_paths_of_copy(profile, source.parent)
    path = directory / f"{chosen.name}.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


@dataclass(frozen=True)
class MutantRun:
    """What one run of the suites against a mutant gave."""

    mutant: Mutant
    returncode: int
    # Test id -> failure (or error) message, from the run's JUnit.
    failed: dict[str, str]
    passed: tuple[str, ...]
    output: str
    seconds: float

    @property
    def killed(self) -> bool:
        """The run failed its tests, among them the check named for the mutant, on the obligation the bug breaks.

        A named check that failed otherwise (its setup broke, another obligation) killed nothing: `caught_otherwise`.
        """
        return self.caught_otherwise is None and self.mutant.killed_by in self.failed

    @property
    def caught_otherwise(self) -> str | None:
        """Why the named check's failure is not the bug's; None where it is (or the check passed).

        The run did not fail its tests, or the named check failed on something else than the obligation the bug
        breaks (its setup, another obligation).
        """
        if self.returncode != EXIT_TESTS_FAILED:
            return f"the run exited {self.returncode}"
        caught = self.failed.get(self.mutant.killed_by)
        if caught is None or f"obligation {self.mutant.breaks} broke" in caught:
            return None
        return f"{self.mutant.killed_by} failed, but not on {self.mutant.breaks}: {caught}"


def junit_results(reports: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """(failed test -> failure text, passed tests), from the one run's JUnit under `reports`."""
    junits = list(reports.glob("*/junit.xml"))
    if len(junits) != 1:
        return {}, ()
    failed: dict[str, str] = {}
    passed: list[str] = []
    for case in ElementTree.parse(junits[0]).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        # A check of an xdist group is named with the group after an "@" (test_x@real-node) by pytest-xdist.
        name = str(case.get("name")).split("@", 1)[0]
        if problem is not None:
            # A test whose call failed and whose teardown then errored has two <testcase> elements, the call's
            # first: keep that one, it says what the check caught.
            failed.setdefault(name, " ".join(str(problem.get("message", "")).split())[:400])
        elif case.find("skipped") is None:
            passed.append(name)
    return failed, tuple(name for name in passed if name not in failed)


def selection(tests: list[str]) -> str:
    """A `-k` expression selecting these test ids by function name."""
    return " or ".join(sorted({test.split("[", 1)[0] for test in tests}))


def run_mutant(
    chosen: Mutant,
    workdir: Path,
    tests: list[str] | None = None,
    cluster: Path | None = None,
    base: Path | None = None,
) -> MutantRun:
    """Run the bundled suites' `tests` (default: the named check) against `chosen` on a private local cluster.

    `cluster`: the state directory of a cluster shared by mutants run one after another (`swap_in` puts this
    mutant's driver in; a shipped mutant still gets a cluster of its own); None starts one in `workdir`. `base`: as
    for `mutant_profile`.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    profile = mutant_profile(chosen, workdir, base)
    state_dir = workdir / "cluster" if cluster is None or chosen.shipped else cluster
    if state_dir == cluster:
        refused = swap_in(profile, cluster, MUTANT_NODES)
        if refused is not None:
            return MutantRun(chosen, EXIT_NO_START, {}, (), refused[-OUTPUT_TAIL:], time.monotonic() - started)
    command = [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "--no-html",
        "-n",
        "0",  # one check: in the run's own process, no xdist worker to start
        "--nodes",
        str(MUTANT_NODES),
        # One real node: each shipped mutant's check (the rolling update) runs on node 0, and a second node would
        # only add its start and teardown to every mutant's run; two for a check that stops the driver on its own.
        *(["--real-node", "--real-nodes", str(chosen.real_nodes)] if chosen.shipped else []),
        f"--profile={profile}",
        f"--dra-state-dir={state_dir}",
        f"--dra-reports-dir={workdir / 'reports'}",
        "-p",
        "no:cacheprovider",
        "-k",
        selection(tests or [chosen.killed_by]),
        str(paths.suites_dir()),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=MUTANT_RUN_DEADLINE, check=False)
    failed, passed = junit_results(workdir / "reports")
    return MutantRun(
        chosen,
        result.returncode,
        failed,
        passed,
        (result.stdout + result.stderr)[-OUTPUT_TAIL:],
        time.monotonic() - started,
    )


def assert_caught(mutant: Mutant, tmp_path: Path, cluster: Path | None = None) -> None:
    """Run the suites against `mutant`: the run fails, and its named check fails on the obligation it breaks.

    `cluster`: as for `run_mutant`.
    """
    run = run_mutant(mutant, tmp_path, cluster=cluster)
    assert run.returncode == EXIT_TESTS_FAILED, f"the run against mutant {mutant} did not fail its tests:\n{run.output}"
    assert run.caught_otherwise is None, run.caught_otherwise
    assert run.killed, f"mutant {mutant} survived {mutant.killed_by}; failed instead: {run.failed}\n{run.output}"

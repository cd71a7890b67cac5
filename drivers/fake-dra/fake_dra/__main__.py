"""`fake-dra`: run the reference DRA driver for one node until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from dra_wire.kubelet_api import load
from dra_wire.stop_signals import hold_stop_signals, wait_for_stop_signal
from fake_dra import control, server
from fake_dra.broken import BrokenMode
from fake_dra.config import HEALTH_SERVICES, PROFILES, DriverConfig
from fake_dra.core import DriverCore
from fake_dra.fabric import CONTROLLER_CONNECTIONS, AttachController
from fake_dra.faults import FaultSet
from fake_dra.identifiers import ID_FORMATS, REFERENCE
from fake_dra.kube import PUBLISH_WORKERS, DriverAPI, api_client, denial
from fake_dra.rate_limit import TokenBucket
from fake_dra.recorder import CallLog
from fake_dra.state import PreparedClaims

# Prepared claims survive restarts in this file of the state dir.
PREPARED_FILE = "prepared.json"
# gRPC servers get this long to finish in-flight calls on shutdown.
SHUTDOWN_GRACE = 5.0


# The device count may come from the environment instead of --devices, as many drivers' DaemonSets set it.
DEVICES_ENV = "FAKE_DRA_DEVICES"
# --standard-paths: the kubelet root many vendor drivers hard-code (one instance per host).
STANDARD_KUBELET_ROOT = Path("/var/lib/kubelet")


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> DriverConfig:
    """Command line (and FAKE_DRA_DEVICES) -> DriverConfig."""
    parser = argparse.ArgumentParser(prog="fake-dra", description=__doc__)
    parser.add_argument("--driver-name", required=True)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--kubelet-root", type=Path, default=None, help=f"default {STANDARD_KUBELET_ROOT}")
    parser.add_argument(
        "--standard-paths",
        action="store_true",
        help=f"hard-code the sockets under {STANDARD_KUBELET_ROOT} (plugins_registry/, plugins/<driver>/), as many "
        "vendor drivers do; --kubelet-root is then refused",
    )
    parser.add_argument(
        "--rolling-update-uid",
        default="",
        help="its pod's UID (downward API): sockets named <driver>-<uid>-reg.sock and dra-<uid>.sock, and prepared "
        "claims shared through a file lock, so a DaemonSet with maxSurge runs an old and a new instance side by side",
    )
    parser.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"))
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/fake-dra"))
    parser.add_argument("--profile", choices=PROFILES, default="gpu")
    parser.add_argument(
        "--devices", type=int, default=None, help=f"devices in the node's pool (default: ${DEVICES_ENV}, else 4)"
    )
    parser.add_argument("--kubeconfig", type=Path, default=None, help="default: in-cluster configuration")
    parser.add_argument("--delete-slices-on-exit", action="store_true")
    parser.add_argument("--driver-version", default="1.0.0", help="release to play: 1.x.y or 2.x.y (default 1.0.0)")
    parser.add_argument(
        "--broken-mode",
        action="append",
        default=[],
        choices=[mode.value for mode in BrokenMode],
        help="start as a broken driver (a mutant the conformance checks must catch); repeatable",
    )
    # Variants: where the contract allows several behaviours, a profile selects one (defaults: the reference behaviour).
    parser.add_argument(
        "--health-service",
        choices=list(HEALTH_SERVICES),
        default="v1+v1alpha1",
        help="DRAResourceHealth versions served and listed in GetInfo; none: no health service (default v1+v1alpha1)",
    )
    parser.add_argument(
        "--status-conditions",
        choices=["ready", "none"],
        default="ready",
        help="ready: status.devices entries carry Ready=True; none: data (and networkData) only (default ready)",
    )
    parser.add_argument(
        "--keep-status-after-unprepare",
        action="store_true",
        help="unprepare leaves the status.devices entries (the API server drops them when the claim is deallocated)",
    )
    parser.add_argument(
        "--unknown-claim-answer",
        choices=["per-claim", "whole-call"],
        default="per-claim",
        help="refuse a claim this node cannot prepare (missing, not allocated here) with a per-claim error, or fail "
        "the whole NodePrepareResources call as the upstream kubeletplugin helper does (default per-claim)",
    )
    parser.add_argument(
        "--refuse-devices-held-by-other-claims",
        action="store_true",
        help="refuse to prepare a claim (per claim) while another claim still holds one of its devices on this node; "
        "the kubelet retries until it has unprepared that claim",
    )
    parser.add_argument(
        "--device-id-format",
        choices=ID_FORMATS,
        default=REFERENCE,
        help="gpu and nic devices: reference identifiers, or words (zq7-... UUIDs, serials, interfaces and hardware "
        "addresses that match no known pattern, IPv6 addresses) in attributes, status data and networkData",
    )
    parser.add_argument(
        "--api-qps",
        type=float,
        default=0.0,
        help="limit its API requests to this many per second after a burst, as client-go does (default 0: no limit)",
    )
    parser.add_argument("--api-burst", type=int, default=10, help="requests allowed at once under --api-qps")
    parser.add_argument(
        "--controller-kubeconfig",
        type=Path,
        default=None,
        help="gpu-fabric: run the attach controller with this identity (its own ServiceAccount, not the plugin's)",
    )
    parser.add_argument(
        "--attach-delay",
        type=float,
        default=1.0,
        help="gpu-fabric: seconds one attach takes before the binding condition is written (default 1)",
    )
    args = parser.parse_args(argv)
    if args.standard_paths and args.kubelet_root is not None:
        parser.error(f"--standard-paths fixes the kubelet root at {STANDARD_KUBELET_ROOT}: drop --kubelet-root")
    if args.api_qps < 0 or args.api_burst < 1:
        parser.error(f"--api-qps must be 0 or more and --api-burst at least 1, got {args.api_qps} and {args.api_burst}")
    if args.devices is None:
        from_env = environ.get(DEVICES_ENV, "4")
        if not from_env.isdigit():
            parser.error(f"{DEVICES_ENV} must be a whole number, got {from_env!r}")
        args.devices = int(from_env)
    if args.attach_delay < 0:
        parser.error(f"--attach-delay must not be negative, got {args.attach_delay}")
    if args.devices < 1:
        parser.error(f"--devices must be at least 1, got {args.devices}")
    if not re.fullmatch(r"[12]\.\d+\.\d+", args.driver_version):
        parser.error(f"--driver-version must be 1.x.y or 2.x.y, got {args.driver_version}")
    return DriverConfig(
        driver_name=args.driver_name,
        node_name=args.node_name,
        kubelet_root=args.kubelet_root or STANDARD_KUBELET_ROOT,
        cdi_dir=args.cdi_dir,
        state_dir=args.state_dir,
        profile=args.profile,
        devices=args.devices,
        kubeconfig=args.kubeconfig,
        delete_slices_on_exit=args.delete_slices_on_exit,
        broken=frozenset(BrokenMode(mode) for mode in args.broken_mode),
        driver_version=args.driver_version,
        health_services=HEALTH_SERVICES[args.health_service],
        ready_condition=args.status_conditions == "ready",
        keep_status_after_unprepare=args.keep_status_after_unprepare,
        whole_call_refusal=args.unknown_claim_answer == "whole-call",
        refuse_held_devices=args.refuse_devices_held_by_other_claims,
        id_format=args.device_id_format,
        api_qps=args.api_qps,
        api_burst=args.api_burst,
        controller_kubeconfig=args.controller_kubeconfig,
        attach_delay=args.attach_delay,
        rolling_update_uid=args.rolling_update_uid,
    )


def remove_other_instances_sockets(config: DriverConfig) -> None:
    """The REMOVES_OTHER_INSTANCES_SOCKETS bug: every socket of this driver but its own is taken for a stale one."""
    own = {config.registration_socket, config.dra_socket, config.control_socket}
    candidates = [
        *config.registration_socket.parent.glob(f"{config.driver_name}*.sock"),
        *config.plugin_dir.glob("*.sock"),
    ]
    for path in candidates:
        if path not in own:
            path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """Run until a signal; exit 1 with one line if start-up fails."""
    config = parse_args(argv)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if config.is_broken(BrokenMode.LOSES_STATE_ON_RESTART):
        (config.state_dir / PREPARED_FILE).unlink(missing_ok=True)  # as if the state had lived in memory
    hold_stop_signals()  # before the API client, gRPC and the pool keeper start threads
    try:
        connections = server.WORKERS + PUBLISH_WORKERS  # every gRPC worker, or every slice writer, at once
        limit = TokenBucket(config.api_qps, config.api_burst) if config.api_qps > 0 else None
        api = DriverAPI(api_client(config.kubeconfig, connections), config.driver_name, limit)
        core = DriverCore(
            config,
            api,
            FaultSet(),
            CallLog(config.state_dir / "calls.jsonl", config.node_name),
            PreparedClaims(
                config.state_dir / PREPARED_FILE,
                config.driver_version,
                shared=bool(config.rolling_update_uid),
                writes_outside_lock=config.is_broken(BrokenMode.CHECKPOINT_WRITTEN_OUTSIDE_LOCK),
            ),
        )
        if core.prepared.written_by_major > config.major and config.is_broken(BrokenMode.DROPS_POOL_AFTER_DOWNGRADE):
            api.delete_pool(config.node_name)  # the bug: a newer release's state makes it give up its pool
        else:
            core.publish()
    except ApiException as error:
        print(f"fake-dra: publish slices for {config.node_name}: {denial(error)}", file=sys.stderr)
        return 1
    if config.is_broken(BrokenMode.REMOVES_OTHER_INSTANCES_SOCKETS):
        remove_other_instances_sockets(config)
    grpc_servers = server.start(core, load())
    control_server = control.serve(core, config.control_socket)
    controller = None
    if config.controller_kubeconfig is not None:
        controller = AttachController(
            config, api_client(config.controller_kubeconfig, CONTROLLER_CONNECTIONS), core.faults, core.attachments
        )
        controller.start()
    print(
        f"fake-dra {config.driver_name} serving node {config.node_name}, pool generation {core.generation}", flush=True
    )
    wait_for_stop_signal()
    began = time.monotonic()
    print(f"fake-dra stopping: gRPC servers ({SHUTDOWN_GRACE:g} s grace), then the control socket", flush=True)
    core.stop_keeping_pool()
    if controller is not None:
        controller.stop()
    stopped = [grpc_server.stop(SHUTDOWN_GRACE) for grpc_server in grpc_servers]  # one grace period for all
    for done in stopped:
        done.wait()
    control_server.shutdown()
    for path in (config.registration_socket, config.dra_socket, config.control_socket):
        path.unlink(missing_ok=True)
    if config.delete_slices_on_exit:
        print(f"fake-dra stopped serving after {time.monotonic() - began:.1f} s; deleting its slices", flush=True)
        api.delete_pool(config.node_name)
    print(f"fake-dra stopped after {time.monotonic() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

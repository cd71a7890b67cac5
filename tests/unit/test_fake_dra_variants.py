"""The reference driver's variants: start-time options for behaviours the contract leaves open, and their profiles.

Each option is checked at its seam (command line -> DriverConfig -> core or gRPC server) without a cluster: claims
come from an in-memory API, and the gRPC services are served on unix sockets in a temporary directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from dra_conformance import paths
from dra_conformance.driver.profile import Capability, Strictness, load_profile
from dra_conformance.driver.reference import behaviour_args
from dra_wire.kubelet_api import KubeletAPI, load
from fake_dra import cdi, server
from fake_dra.__main__ import parse_args
from fake_dra.broken import BrokenMode
from fake_dra.config import HEALTH_SERVICES, DriverConfig
from fake_dra.core import ClaimRef, ClaimRefused, DriverCore
from fake_dra.faults import FaultSet
from fake_dra.kube import DriverAPI
from fake_dra.recorder import CallLog
from fake_dra.state import PreparedClaims

DRIVER = "gpu.example.com"
NAMESPACE = "ns"
REQUIRED = ["--driver-name", DRIVER, "--node-name", "node-a"]
VARIANTS = paths.fixtures_dir() / "profiles" / "reference-variants"
# Variant profile -> (its one extra argument, the DriverConfig field it sets, the value).
PROFILE_OPTIONS: dict[str, tuple[str, str, object]] = {
    "status-data-only": ("--status-conditions=none", "ready_condition", False),
    "status-kept-after-unprepare": ("--keep-status-after-unprepare", "keep_status_after_unprepare", True),
    "unknown-claim-whole-call": ("--unknown-claim-answer=whole-call", "whole_call_refusal", True),
    "no-health-service": ("--health-service=none", "health_services", ()),
    "health-v1alpha1-only": ("--health-service=v1alpha1", "health_services", ("v1alpha1",)),
    "prepare-refused-while-device-held": ("--refuse-devices-held-by-other-claims", "refuse_held_devices", True),
}
# A gRPC call against the test's own sockets answers well within this.
CALL_TIMEOUT = 10.0

Manifest = dict[str, Any]


# --- an in-memory API server and a driver core on it ---------------------------------------------------------------


def _claim(name: str, uid: str, node: str = "node-a", device: str = "gpu-0", **result: object) -> Manifest:
    """A claim allocated one device of DRIVER on `node` (`result`: more fields of the allocation result)."""
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    allocated = {"driver": DRIVER, "pool": node, "device": device, "request": "gpu", **result}
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "status": {
            "allocation": {
                "devices": {"results": [allocated]},
                "nodeSelector": {"nodeSelectorTerms": [selector]},
            }
        },
    }


class _FakeAPI(DriverAPI):
    """Claims by name in memory; status writes recorded per claim (the last one wins, as with apply)."""

    def __init__(self, *claims: Manifest) -> None:
        super().__init__(ApiClient(), DRIVER)
        self.claims = {c["metadata"]["name"]: c for c in claims}
        self.status: dict[str, list[Manifest]] = {}
        self.gets = 0

    def get_claim(self, namespace: str, name: str) -> Manifest:
        self.gets += 1
        if name not in self.claims:
            raise ApiException(status=404, reason=f'resourceclaims "{name}" not found')
        return self.claims[name]

    def apply_device_status(self, claim: Manifest, entries: list[Manifest]) -> None:
        self.status[claim["metadata"]["name"]] = entries

    def list_slices(self, node: str) -> list[Manifest]:
        return []

    def publish_pool(self, node: str, manifests: list[Manifest], *, delete_first: bool = False) -> None:
        return None


def _config(root: Path, *flags: str) -> DriverConfig:
    """The driver's configuration from its real command line, rooted in `root`."""
    return parse_args(
        [*REQUIRED, f"--kubelet-root={root / 'k'}", f"--cdi-dir={root / 'cdi'}", f"--state-dir={root / 's'}", *flags]
    )


def _core(config: DriverConfig, api: DriverAPI) -> DriverCore:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    calls = CallLog(config.state_dir / "calls.jsonl", config.node_name)
    return DriverCore(config, api, FaultSet(), calls, PreparedClaims(config.state_dir / "prepared.json"))


def _with(config: DriverConfig, field: str, value: object) -> DriverConfig:
    """`config` with one field changed."""
    changes: dict[str, Any] = {field: value}
    return dataclasses.replace(config, **changes)


def _ref(claim: Manifest) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


MISSING = ClaimRef(namespace=NAMESPACE, uid="uid-missing", name="no-such-claim")


# --- the command line ----------------------------------------------------------------------------------------------


def test_defaults_keep_the_reference_behaviour(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config.health_services == ("v1", "v1alpha1")
    assert config.ready_condition and not config.keep_status_after_unprepare and not config.whole_call_refusal
    assert not config.refuse_held_devices
    defaults = DriverConfig(DRIVER, "node-a", tmp_path / "k", tmp_path / "cdi", tmp_path / "s")
    variant_fields = (
        "health_services",
        "ready_condition",
        "keep_status_after_unprepare",
        "whole_call_refusal",
        "refuse_held_devices",
    )
    assert [getattr(defaults, name) for name in variant_fields] == [getattr(config, name) for name in variant_fields]


@pytest.mark.parametrize(("flag", "field", "value"), list(PROFILE_OPTIONS.values()), ids=list(PROFILE_OPTIONS))
def test_each_option_sets_its_one_field(tmp_path: Path, flag: str, field: str, value: object) -> None:
    reference = _config(tmp_path)
    assert _config(tmp_path, flag) == _with(reference, field, value)


@pytest.mark.parametrize(
    "flag", ["--health-service=v2", "--status-conditions=all", "--unknown-claim-answer=ignore"], ids=str
)
def test_an_unknown_choice_is_refused(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _config(tmp_path, flag)
    assert "invalid choice" in capsys.readouterr().err


# --- --health-service: GetInfo lists exactly what dra.sock serves ---------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "health"),
    [
        ("v1+v1alpha1", ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]),
        ("v1", ["v1.DRAResourceHealth"]),
        ("v1alpha1", ["v1alpha1.DRAResourceHealth"]),
        ("none", []),
    ],
)
def test_supported_versions_list_the_draplugin_and_the_chosen_health_services(
    tmp_path: Path, choice: str, health: list[str]
) -> None:
    versions = server.supported_versions(_config(tmp_path, f"--health-service={choice}"))
    assert versions == ["v1.DRAPlugin", "v1beta1.DRAPlugin", *health], versions


def test_every_health_choice_names_versions_the_kubelet_knows() -> None:
    # The kubelet 1.37 supports these two (k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin.go:59-62).
    assert {version for versions in HEALTH_SERVICES.values() for version in versions} == {"v1", "v1alpha1"}


@pytest.fixture(scope="module")
def kubelet_api() -> KubeletAPI:
    return load()


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A directory whose socket paths stay under the unix socket limit (108 bytes), unlike pytest's tmp_path."""
    with tempfile.TemporaryDirectory(prefix="fdv-") as root:
        yield Path(root)


@contextlib.contextmanager
def _serving(core: DriverCore, api: KubeletAPI) -> Iterator[None]:
    """The driver's gRPC servers (registration socket, dra.sock) for the length of the block."""
    servers = server.start(core, api)
    try:
        yield
    finally:
        for grpc_server in servers:
            grpc_server.stop(0).wait()


def _health_answers(api: KubeletAPI, core: DriverCore, version: str) -> str:
    """What NodeWatchResources of `version` on dra.sock answers: "devices: N" or the gRPC error code."""
    messages, services = getattr(api, f"health_{version}"), getattr(api, f"health_{version}_grpc")
    with grpc.insecure_channel(f"unix://{core.config.dra_socket}") as channel:
        stream = services.DRAResourceHealthStub(channel).NodeWatchResources(
            messages.NodeWatchResourcesRequest(), timeout=CALL_TIMEOUT
        )
        try:
            return f"devices: {len(next(stream).devices)}"
        except grpc.RpcError as error:
            return str(error.code().name)
        finally:
            stream.cancel()


@pytest.mark.needs_go
@pytest.mark.parametrize("choice", list(HEALTH_SERVICES))
def test_getinfo_advertises_exactly_the_health_services_dra_sock_serves(
    kubelet_api: KubeletAPI, short_root: Path, choice: str
) -> None:
    core = _core(_config(short_root, f"--health-service={choice}", "--devices=3"), _FakeAPI())
    with _serving(core, kubelet_api):
        with grpc.insecure_channel(f"unix://{core.config.registration_socket}") as channel:
            info = kubelet_api.registration_grpc.RegistrationStub(channel).GetInfo(
                kubelet_api.registration.InfoRequest(), timeout=CALL_TIMEOUT
            )
        advertised = [v.split(".")[0] for v in info.supported_versions if v.endswith(".DRAResourceHealth")]
        assert advertised == list(HEALTH_SERVICES[choice]), list(info.supported_versions)
        answers = {version: _health_answers(kubelet_api, core, version) for version in ("v1", "v1alpha1")}
        expected = {v: "devices: 3" if v in advertised else "UNIMPLEMENTED" for v in ("v1", "v1alpha1")}
        assert answers == expected, f"advertised {advertised}"


# --- --status-conditions ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["gpu", "nic"])
def test_data_only_entries_carry_data_and_network_data_but_no_conditions(tmp_path: Path, profile: str) -> None:
    claim = _claim("c1", "uid-1", device=f"{profile}-0")
    results = {}
    for option in ("ready", "none"):
        api = _FakeAPI(claim)
        root = tmp_path / option
        _core(_config(root, f"--profile={profile}", f"--status-conditions={option}"), api).prepare([_ref(claim)])
        (results[option],) = api.status["c1"]
    assert [(c["type"], c["status"]) for c in results["ready"]["conditions"]] == [("Ready", "True")], results["ready"]
    assert "conditions" not in results["none"], results["none"]
    assert results["none"]["data"]["cdiDeviceIDs"] == [f"{DRIVER}/{profile}=uid-1-{profile}-0"], results["none"]
    assert ("networkData" in results["none"]) == (profile == "nic"), results["none"]


def test_the_foreign_claim_mutant_still_writes_its_ready_false_without_conditions(tmp_path: Path) -> None:
    claim = _claim("c1", "uid-1", node="node-b")
    api = _FakeAPI(claim)
    config = dataclasses.replace(
        _config(tmp_path, "--status-conditions=none"), broken=frozenset({BrokenMode.WRITES_STATUS_FOR_FOREIGN_CLAIMS})
    )
    results = _core(config, api).prepare([_ref(claim)])
    assert "allocated to node node-b" in results["uid-1"].error
    (entry,) = api.status["c1"]
    assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [("Ready", "False", "WrongNode")]


# --- --keep-status-after-unprepare -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept"])
def test_unprepare_removes_or_keeps_the_status_entries_and_cleans_up_the_node(tmp_path: Path, keep: bool) -> None:
    claim = _claim("c1", "uid-1")
    api = _FakeAPI(claim)
    config = _config(tmp_path, *(["--keep-status-after-unprepare"] if keep else []))
    core = _core(config, api)
    prepared = core.prepare([_ref(claim)])["uid-1"]
    written = api.status["c1"]
    gets = api.gets
    assert core.unprepare([_ref(claim)]) == {"uid-1": ""}
    assert api.status["c1"] == (written if keep else []), api.status
    assert api.gets == gets + (0 if keep else 1), "keeping the entries needs no read of the claim"
    assert not cdi.spec_path(config.cdi_dir, DRIVER, "uid-1").exists(), "the CDI spec goes either way"
    assert core.prepared.get("uid-1") is None
    again = core.prepare([_ref(claim)])["uid-1"]
    assert (again.error, again.devices) == ("", prepared.devices), "a kept entry does not stop a new prepare"


def test_kept_status_does_not_make_unprepare_need_the_claim(tmp_path: Path) -> None:
    claim = _claim("c1", "uid-1")
    api = _FakeAPI(claim)
    core = _core(_config(tmp_path, "--keep-status-after-unprepare"), api)
    core.prepare([_ref(claim)])
    del api.claims["c1"]
    assert core.unprepare([_ref(claim)]) == {"uid-1": ""}


# --- --unknown-claim-answer ------------------------------------------------------------------------------------------


def test_per_claim_answer_refuses_only_the_unknown_claim(tmp_path: Path) -> None:
    good = _claim("c1", "uid-1")
    results = _core(_config(tmp_path), _FakeAPI(good)).prepare([_ref(good), MISSING])
    assert results["uid-1"].error == "" and results["uid-1"].devices, results
    assert "no-such-claim" in results["uid-missing"].error, results


@pytest.mark.parametrize(
    "bad",
    [
        MISSING,
        _ref(_claim("c2", "uid-2", node="node-b")),
        ClaimRef(namespace=NAMESPACE, uid="uid-replaced", name="c1"),
    ],
    ids=["missing", "other-node", "replaced"],
)
def test_whole_call_answer_refuses_the_call_before_preparing_any_claim(tmp_path: Path, bad: ClaimRef) -> None:
    good = _claim("c1", "uid-1")
    api = _FakeAPI(good, _claim("c2", "uid-2", node="node-b"))
    config = _config(tmp_path, "--unknown-claim-answer=whole-call")
    core = _core(config, api)
    with pytest.raises(ClaimRefused, match=bad.name):
        core.prepare([_ref(good), bad])
    assert api.status == {}, "no status written for the valid claim"
    assert not config.cdi_dir.exists() or not list(config.cdi_dir.iterdir()), "no CDI spec for the valid claim"
    assert core.prepared.all() == {}
    (call,) = core.calls.calls()
    assert call["outcome"] == "refused whole call (1 of 2 claims)" and set(call["errors"]) == {bad.uid}, call


def test_whole_call_answer_prepares_valid_claims_reading_each_once(tmp_path: Path) -> None:
    claims = [_claim("c1", "uid-1"), _claim("c2", "uid-2", device="gpu-1")]
    api = _FakeAPI(*claims)
    results = _core(_config(tmp_path, "--unknown-claim-answer=whole-call"), api).prepare([_ref(c) for c in claims])
    assert {uid: r.error for uid, r in results.items()} == {"uid-1": "", "uid-2": ""}
    assert api.gets == 2, "the claims read for the check are the ones prepared"


def test_whole_call_answer_leaves_unprepare_of_an_unknown_claim_a_success(tmp_path: Path) -> None:
    core = _core(_config(tmp_path, "--unknown-claim-answer=whole-call"), _FakeAPI())
    assert core.unprepare([MISSING]) == {"uid-missing": ""}


@pytest.mark.needs_go
@pytest.mark.parametrize("answer", ["per-claim", "whole-call"])
def test_the_kubelet_sees_a_per_claim_error_or_a_whole_call_error(
    kubelet_api: KubeletAPI, short_root: Path, answer: str
) -> None:
    good = _claim("c1", "uid-1")
    core = _core(_config(short_root, f"--unknown-claim-answer={answer}"), _FakeAPI(good))
    messages = kubelet_api.dra_v1
    request = messages.NodePrepareResourcesRequest(
        claims=[messages.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in (_ref(good), MISSING)]
    )
    with _serving(core, kubelet_api):
        with grpc.insecure_channel(f"unix://{core.config.dra_socket}") as channel:
            stub = kubelet_api.dra_v1_grpc.DRAPluginStub(channel)
            if answer == "per-claim":
                response = stub.NodePrepareResources(request, timeout=CALL_TIMEOUT)
                errors = {uid: claim.error for uid, claim in response.claims.items()}
                assert errors["uid-1"] == "" and "no-such-claim" in errors["uid-missing"], errors
            else:
                with pytest.raises(grpc.RpcError) as refused:
                    stub.NodePrepareResources(request, timeout=CALL_TIMEOUT)
                assert refused.value.code() == server.REFUSAL_CODE, refused.value
                assert "no-such-claim" in str(refused.value.details()), refused.value.details()


# --- --refuse-devices-held-by-other-claims ---------------------------------------------------------------------------

HOLDS = "--refuse-devices-held-by-other-claims"


def _errors(core: DriverCore, *claims: Manifest) -> dict[str, str]:
    """Each claim's error ("" when prepared) after preparing `claims` in one call."""
    return {uid: result.error for uid, result in core.prepare([_ref(c) for c in claims]).items()}


def test_a_claim_on_a_device_another_claim_holds_is_refused_per_claim_until_that_claim_is_unprepared(
    tmp_path: Path,
) -> None:
    old, new, other = _claim("old", "uid-old"), _claim("new", "uid-new"), _claim("other", "uid-other", device="gpu-1")
    api = _FakeAPI(old, new, other)
    core = _core(_config(tmp_path, HOLDS), api)
    assert _errors(core, old) == {"uid-old": ""}
    errors = _errors(core, new, other)
    assert errors["uid-other"] == "", "the refusal is per claim, not the whole call"
    assert errors["uid-new"] == (
        f"device {DRIVER}/node-a/gpu-0 is still prepared for claim ns/old (uid uid-old) on node node-a; "
        "retry once that claim is unprepared"
    ), errors
    assert core.prepared.get("uid-new") is None and "new" not in api.status, "nothing prepared for the refused claim"
    assert _errors(core, old) == {"uid-old": ""}, "the holder's own prepare again is idempotent"
    assert core.unprepare([_ref(old)]) == {"uid-old": ""}
    assert _errors(core, new) == {"uid-new": ""}, "the kubelet's retry once the holder is unprepared"


def test_without_the_option_a_held_device_is_prepared_for_another_claim(tmp_path: Path) -> None:
    old, new = _claim("old", "uid-old"), _claim("new", "uid-new")
    assert _errors(_core(_config(tmp_path), _FakeAPI(old, new)), old, new) == {"uid-old": "", "uid-new": ""}


def test_admin_access_claims_neither_hold_a_device_nor_are_refused_on_one(tmp_path: Path) -> None:
    monitor = _claim("monitor", "uid-monitor", adminAccess=True)
    workload, second = _claim("workload", "uid-workload"), _claim("second", "uid-second")
    core = _core(_config(tmp_path, HOLDS), _FakeAPI(monitor, workload, second))
    assert _errors(core, monitor, workload) == {"uid-monitor": "", "uid-workload": ""}, "monitor first"
    record = core.prepared.get("uid-monitor")
    assert record is not None and [d.get("adminAccess") for d in record["devices"]] == [True], record
    assert core.unprepare([_ref(monitor)]) == {"uid-monitor": ""}
    assert _errors(core, monitor) == {"uid-monitor": ""}, "the monitor beside the workload"
    assert "claim ns/workload (uid uid-workload)" in _errors(core, second)["uid-second"]


def test_only_the_same_share_of_a_shared_device_is_held(tmp_path: Path) -> None:
    claims = [
        _claim("a", "uid-a", device="gpu-shared-0", shareID="s1"),
        _claim("b", "uid-b", device="gpu-shared-0", shareID="s2"),
        _claim("c", "uid-c", device="gpu-shared-0", shareID="s1"),
    ]
    core = _core(_config(tmp_path, HOLDS, "--profile=gpu-shared"), _FakeAPI(*claims))
    errors = _errors(core, *claims)
    assert errors["uid-a"] == errors["uid-b"] == "", errors
    assert "gpu-shared-0 (share s1) is still prepared for claim ns/a (uid uid-a)" in errors["uid-c"], errors


def test_a_hold_survives_a_restart_of_the_driver(tmp_path: Path) -> None:
    old, new = _claim("old", "uid-old", device="gpu-2"), _claim("new", "uid-new", device="gpu-2")
    config = _config(tmp_path, HOLDS)
    assert _errors(_core(config, _FakeAPI(old, new)), old) == {"uid-old": ""}
    assert "uid uid-old" in _errors(_core(config, _FakeAPI(old, new)), new)["uid-new"]


def test_of_concurrent_prepares_for_one_device_only_one_holds_it(tmp_path: Path) -> None:
    claims = [_claim(f"c{i}", f"uid-{i}", device="gpu-3") for i in range(6)]
    core = _core(_config(tmp_path, HOLDS), _FakeAPI(*claims))
    with ThreadPoolExecutor(len(claims)) as pool:
        errors = list(pool.map(lambda claim: _errors(core, claim)[claim["metadata"]["uid"]], claims))
    assert sum(not error for error in errors) == 1, errors


# --- the variant profiles -------------------------------------------------------------------------------------------


def _values(root: Path, driver: str) -> dict[str, str]:
    kubelet_root = root / "kubelet"
    return {
        "python": "python3",
        "bin:reference_driver_go": "/cache/bin/reference_driver_go",
        "devices": "8",
        "driver": driver,
        "node": "node-a",
        "kubeconfig": str(root / "driver.kubeconfig"),
        "kubelet_root": str(kubelet_root),
        "cdi_dir": str(root / "cdi"),
        "data_dir": str(root / "state"),
    }


def test_every_variant_profile_is_listed_here() -> None:
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(PROFILE_OPTIONS)


@pytest.mark.parametrize(("name", "option"), list(PROFILE_OPTIONS.items()), ids=list(PROFILE_OPTIONS))
def test_variant_profile_is_the_reference_profile_with_its_one_option(
    tmp_path: Path, name: str, option: tuple[str, str, object]
) -> None:
    flag, field, value = option
    reference = load_profile(paths.reference_driver_profile())
    variant = load_profile(VARIANTS / f"{name}.yaml")
    assert variant.strictness == Strictness.CONTRACT
    assert [p.read_bytes() for p in variant.identity.rbac] == [paths.reference_driver_rbac().read_bytes()]
    assert variant.run is not None and reference.run is not None
    assert variant.run.process.args == (*reference.run.process.args, flag)
    assert set(variant.run.versions) == set(reference.run.versions) == {"previous"}
    assert variant.run.versions["previous"].args == (*reference.run.versions["previous"].args, flag)
    values = _values(tmp_path, variant.driver)
    # Both run the Go build (one word of program), whose command line the Python build's parser reads alike.
    assert variant.run.process.command == reference.run.process.command == ("{bin:reference_driver_go}",)
    config = parse_args(variant.run.process.argv(values)[1:])
    assert config == _with(parse_args(reference.run.process.argv(values)[1:]), field, value)
    # Only a driver without a health service stops declaring it; every other capability is the reference's.
    undeclared = set() if config.health_services else {Capability.HEALTH_STREAM}
    assert variant.capabilities == reference.capabilities - undeclared
    same = ("driver", "version", "device_classes", "devices", "timeouts")
    assert [getattr(variant, f) for f in same] == [getattr(reference, f) for f in same]
    assert variant.identity.service_account == reference.identity.service_account


def test_private_instances_carry_the_profiles_behaviour_options_and_nothing_about_where_it_runs() -> None:
    args = (
        "--driver-name={driver}",
        "--kubelet-root={kubelet_root}",
        "--status-conditions=none",
        "--keep-status-after-unprepare",
        "--broken-mode=prepares-wrong-device",
        "--devices=8",
    )
    assert behaviour_args(args) == (
        "--status-conditions=none",
        "--keep-status-after-unprepare",
        "--broken-mode=prepares-wrong-device",
    )

"""The profile's opaqueConfig section: the driver's opaque config API, two samples told apart, an unparsable one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.driver.profile import ConfigEffect, load_profile
from dra_conformance.errors import ProfileError

# A minimal valid profile; the section is appended to it.
VALID = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
identity:
  serviceAccount: {namespace: drivers, name: gpu}
deviceClasses:
- name: gpu
  create: true
devices:
  perNode: 2
capabilities:
  statusDevices: true
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


SECTION = """\
opaqueConfig:
  apiVersion: config.example.com/v1
  kind: GpuConfig
  samples:
  - parameters: {sharing: TimeSlicing}
    effect: {cdiEnv: SHARING=TimeSlicing, statusData: {sharing: TimeSlicing}}
  - parameters: {sharing: Exclusive}
    effect: {cdiEnv: SHARING=Exclusive, statusData: {sharing: Exclusive}}
  unparsable: {apiVersion: config.example.com/v1, kind: GpuConfig, sharing: 7}
"""


def test_the_section_loads_with_apiversion_and_kind_added_to_each_sample(tmp_path: Path) -> None:
    api = load_profile(_write(tmp_path, VALID + SECTION)).opaque_config
    assert api is not None
    first, second = api.samples
    assert first.parameters == {"apiVersion": "config.example.com/v1", "kind": "GpuConfig", "sharing": "TimeSlicing"}
    assert second.effect == ConfigEffect(cdi_env=("SHARING", "Exclusive"), status_data={"sharing": "Exclusive"})
    assert api.unparsable == {"apiVersion": "config.example.com/v1", "kind": "GpuConfig", "sharing": 7}


def test_without_the_section_there_is_no_config_api(tmp_path: Path) -> None:
    assert load_profile(_write(tmp_path, VALID)).opaque_config is None


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("SHARING=Exclusive,", "OTHER=Exclusive,", "opaqueConfig.samples[1].effect.cdiEnv: OTHER=Exclusive against"),
        ("SHARING=Exclusive,", "SHARING=TimeSlicing,", "the same variable with another value"),
        ("{sharing: Exclusive}}", "{sharing: TimeSlicing}}", "opaqueConfig.samples[1].effect.statusData"),
        (
            "effect: {cdiEnv: SHARING=Exclusive, statusData: {sharing: Exclusive}}",
            "effect: {cdiEnv: SHARING=Exclusive}",
            "both declare the same observations",
        ),
        ("  - parameters: {sharing: Exclusive}", "  - parameters: {kind: X}", "opaqueConfig.samples[1].parameters"),
        ("  kind: GpuConfig\n  samples:", "  kind: GpuConfig\n  sample:", "opaqueConfig"),
    ],
    ids=["other-variable", "same-value", "same-status-value", "other-observations", "kind-in-parameters", "typo"],
)
def test_samples_that_cannot_be_told_apart_are_one_located_line(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    assert SECTION.count(old) == 1, old
    with pytest.raises(ProfileError) as refused:
        load_profile(_write(tmp_path, VALID + SECTION.replace(old, new)))
    assert problem in str(refused.value), str(refused.value)
    assert str(refused.value).startswith(f"{tmp_path / 'profile.yaml'}:"), str(refused.value)


def test_every_reference_go_build_profile_declares_the_go_builds_config_api() -> None:
    profiles = [
        paths.fixtures_dir() / "profiles" / "reference-driver.yaml",
        *sorted((paths.fixtures_dir() / "profiles" / "reference-variants").glob("*.yaml")),
    ]
    for path in profiles:
        api = load_profile(path).opaque_config
        assert api is not None, path
        assert (api.api_version, api.kind) == ("config.fake-dra.example.com/v1alpha1", "GpuConfig"), path
        assert [s.effect.cdi_env for s in api.samples] == [
            ("FAKE_DRA_SHARING", "TimeSlicing"),
            ("FAKE_DRA_SHARING", "Exclusive"),
        ], path

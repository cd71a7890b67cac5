"""A profile names paths only inside its directory, the run's directories or its `hostPaths`; else one line, exit 2.

And a driver swap deletes only the directories the deployment created, never one that existed before.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.backends.local import driver_swap, drivers
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.driver import confinement
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import ProfileError, UsageError

# Line numbers below refer to this text (line 1 is `apiVersion`); {extra} is replaced by lines for each case.
PROFILE = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
run:
  command: [gpu-driver]
  args: ["--node={node}"]
  createDirs: ["{plugins_dir}"]
identity:
  serviceAccount: {namespace: drivers, name: gpu}
  rbac: [rbac.yaml]
deviceClasses:
- {name: gpu, create: true}
devices: {perNode: 2}
capabilities: {}
"""
RBAC = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: gpu, namespace: drivers}\n"


def _profile(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rbac.yaml").write_text(RBAC)
    path = directory / "profile.yaml"
    path.write_text(text)
    return path


def _changed(old: str, new: str) -> str:
    assert PROFILE.count(old) == 1, f"{old!r} is not one line of PROFILE"
    return PROFILE.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "problem"),
    [
        (
            '["{plugins_dir}"]',
            '["{data_dir}/../../../../../../../somewhere"]',
            7,
            "run.createDirs[0]",
            "leaves {data_dir} through `..`",
        ),
        ('["{plugins_dir}"]', '["/var/tmp/somewhere"]', 7, "run.createDirs[0]", "/var/tmp/somewhere is outside"),
        ('["{plugins_dir}"]', '["somewhere"]', 7, "run.createDirs[0]", "starts with {data_dir} or {plugins_dir}"),
        ('["{plugins_dir}"]', '["{data_dir}-evil"]', 7, "run.createDirs[0]", "followed by `/`"),
        ('["{plugins_dir}"]', '["{data_dir}/{python}"]', 7, "run.createDirs[0]", "{python} may not stand inside"),
        ("rbac: [rbac.yaml]", "rbac: [/etc/hostname]", 10, "identity.rbac[0]", "/etc/hostname is outside"),
        ("rbac: [rbac.yaml]", "rbac: [../../rbac.yaml]", 10, "identity.rbac[0]", "is outside the profile's directory"),
        ("command: [gpu-driver]", "command: [/usr/bin/gpu-driver]", 5, "run.command[0]", "/usr/bin/gpu-driver is"),
        ("command: [gpu-driver]", "command: [../bin/gpu-driver]", 5, "run.command[0]", "leaves the working directory"),
        ("capabilities: {}", "capabilities: {}\nhostPaths: [/]", 15, "hostPaths[0]", "the whole file system"),
    ],
    ids=[
        "createDirs-dotdot",
        "createDirs-absolute",
        "createDirs-relative",
        "createDirs-sibling",
        "createDirs-placeholder-inside",
        "rbac-absolute",
        "rbac-dotdot",
        "command-absolute",
        "command-dotdot",
        "hostPaths-root",
    ],
)
def test_a_path_that_leaves_its_places_is_one_located_line(
    tmp_path: Path, old: str, new: str, line: int, key: str, problem: str
) -> None:
    path = _profile(tmp_path / "profile", _changed(old, new))
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    error = refused.value
    assert (error.line, error.key_path) == (line, key), f"located at {error.line} {error.key_path}: {error}"
    assert problem in error.problem and "\n" not in str(error), str(error)


def test_host_paths_let_a_profile_name_those_paths_and_are_absolute(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "rbac").mkdir(parents=True)
    (host / "rbac" / "extra.yaml").write_text(RBAC)
    text = _changed('["{plugins_dir}"]', f'["{{plugins_dir}}", "{host}/{{node}}/cache"]')
    text = text.replace("rbac: [rbac.yaml]", f"rbac: [rbac.yaml, {host}/rbac/extra.yaml]")
    text = text.replace("command: [gpu-driver]", f"command: [{host}/bin/gpu-driver]")
    profile = load_profile(_profile(tmp_path / "profile", text + f"hostPaths: [{host}, ../elsewhere]\n"))
    assert profile.host_paths == (host, tmp_path / "elsewhere"), profile.host_paths
    line = confinement.host_paths_line(profile.source, profile.host_paths)
    assert line is not None and f"{host}, {tmp_path / 'elsewhere'}" in line, line


def test_a_profile_within_its_places_names_no_host_path(tmp_path: Path) -> None:
    text = _changed('["{plugins_dir}"]', '["{plugins_dir}", "{data_dir}/a/../b/{node}", "{kubelet_root}"]')
    profile = load_profile(_profile(tmp_path, text))
    assert profile.host_paths == () and confinement.host_paths_line(profile.source, ()) is None


def test_the_escaping_profile_is_refused_by_the_cli_before_anything_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "outside" / "somewhere"
    escaping = f'["{{data_dir}}/{"../" * 12}{str(target).lstrip("/")}"]'
    path = _profile(tmp_path / "profile", _changed('["{plugins_dir}"]', escaping))
    state = tmp_path / "state"

    code = main(["cluster", "up", "--profile", str(path), "--state-dir", str(state)])

    err = capsys.readouterr().err
    assert code == EXIT_USAGE, f"exit {code}: {err}"
    assert len(err.splitlines()) == 1 and "run.createDirs[0]" in err and "leaves {data_dir}" in err, err
    assert not target.exists() and not state.exists(), f"created: {target.exists()=} {state.exists()=}"


def test_a_rendered_directory_outside_the_run_is_refused(tmp_path: Path) -> None:
    roots = (tmp_path / "data", tmp_path / "host")
    confinement.check_rendered([tmp_path / "data" / "x", tmp_path / "host"], roots, tmp_path / "p.yaml")
    with pytest.raises(UsageError, match=re.escape(f"{tmp_path / 'elsewhere'} is outside the run")):
        confinement.check_rendered([tmp_path / "data" / ".." / "elsewhere"], roots, tmp_path / "p.yaml")


def test_only_directories_that_did_not_exist_are_recorded_as_created(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    new = tmp_path / "new" / "deep"

    created = confinement.make_directories([existing, new, new])

    assert created == (new,), created
    assert new.is_dir() and (existing / "keep.txt").read_text() == "mine"


def test_a_swap_deletes_what_the_deployment_created_and_never_a_directory_that_existed(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path / "state")
    host = tmp_path / "host-existing"
    data = layout.root / "nodes" / "n0" / "driver-data"
    runtime = drivers.runtime_dir(layout) / "n0"
    record: dict[str, Any] = {
        "driver": "gpu.example.com",
        "objects": [],
        "directories": {"n0": [str(data), str(host)]},
        drivers.CREATED_KEY: {"n0": [str(data)]},
    }
    assert driver_swap.directories_to_delete(record, layout) == [data]
    del record[drivers.CREATED_KEY]  # a record of an older dra-conformance: only the cluster's own directories
    record["directories"]["n0"].append(str(runtime))
    assert driver_swap.directories_to_delete(record, layout) == [data, runtime]

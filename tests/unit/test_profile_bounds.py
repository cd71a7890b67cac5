"""Hostile, malformed or oversized inputs end in one line, fast: alias bombs, deep nesting, bad values and files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from dra_conformance.backends.registry import MAX_LOCAL_NODES
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.driver import bounded_yaml
from dra_conformance.driver.profile import _duplicate_key, load_profile
from dra_conformance.errors import ProfileError

# One profile read, bomb or not, stays well under the 1 s; this leaves room for a loaded CI machine.
LOAD_CPU_SECONDS = 0.5

HEAD = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: gpu.example.com
identity:
  serviceAccount: {namespace: drivers, name: gpu}
  rbac: [rbac.yaml]
deviceClasses:
- {name: gpu, create: true}
devices: {perNode: 2}
capabilities: {}
"""


def _write(
    tmp_path: Path, text: str, rbac: str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: drivers}\n"
) -> Path:
    (tmp_path / "rbac.yaml").write_text(rbac)
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def _refused(path: Path) -> tuple[ProfileError, float]:
    began = time.process_time()
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    return refused.value, time.process_time() - began


def _bomb(levels: int, width: int = 9) -> str:
    """A 'billion laughs' document: each level an anchored list of `width` aliases of the one below."""
    lines = [HEAD.rstrip("\n"), f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * width)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_one_line_in_well_under_a_second(tmp_path: Path) -> None:
    text = _bomb(levels=10)  # 9**10 leaves once expanded
    assert len(text.encode()) < 1024, len(text.encode())
    error, seconds = _refused(_write(tmp_path, text))
    assert "alias bomb" in error.problem and "\n" not in str(error), str(error)
    assert seconds < LOAD_CPU_SECONDS, f"{seconds:.3f} s of CPU for {error}"


def test_a_document_at_the_node_bound_is_read_and_validated_in_time(tmp_path: Path) -> None:
    """The bound keeps the slowest accepted document, validated node by node, under the deadline too."""
    per_class = 130  # 130 classes x 130 selectors, through aliases: just under MAX_PROFILE_NODES once expanded
    selectors = ", ".join(['"device.driver == \\"x\\""'] * per_class)
    classes = [f"- &c {{name: gpu, create: true, selectors: [{selectors}]}}"] + ["- *c"] * (per_class - 1)
    text = HEAD.replace("- {name: gpu, create: true}", "\n".join(classes))
    error, seconds = _refused(_write(tmp_path, text))
    assert error.key_path == "deviceClasses[1].name" and "listed twice" in error.problem, str(error)
    assert seconds < LOAD_CPU_SECONDS, f"{seconds:.3f} s of CPU"


def test_the_duplicate_key_walk_is_linear_in_distinct_nodes() -> None:
    """40 levels of two aliases each: 2**40 paths, walked once per node (the recursive walk never ended)."""
    lines = ["a0: &a0 {x: 1}"] + [f"a{n}: &a{n} [*a{n - 1}, *a{n - 1}]" for n in range(1, 40)] + ["z: 1", "z: 2"]
    root = yaml.compose("\n".join(lines))
    assert root is not None
    began = time.process_time()
    found = _duplicate_key(root)
    seconds = time.process_time() - began
    assert found == (("z",), 42), found
    assert seconds < LOAD_CPU_SECONDS, f"{seconds:.3f} s of CPU"


def test_the_first_duplicate_in_the_file_is_named_even_when_nested() -> None:
    root = yaml.compose("a:\n  b: 1\n  b: 2\nc: 1\nc: 2\n")
    assert root is not None
    assert _duplicate_key(root) == (("a", "b"), 3)


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("x: &x [*x]\n", "refers to a node that contains it"),
        ("x: " + "[" * (bounded_yaml.MAX_DEPTH + 5) + "]" * (bounded_yaml.MAX_DEPTH + 5) + "\n", "levels deep"),
        ("x: " + "[" * 2000 + "]" * 2000 + "\n", "levels deep"),
        ("x: 2001-13-45\n", "a value cannot be read"),
        ("x: " + "9" * 5000 + "\n", "a value cannot be read"),
        ("x: \x07\n", "special characters are not allowed"),
    ],
    ids=["recursive-alias", "deep", "deeper-than-recursion", "bad-timestamp", "huge-int", "control-character"],
)
def test_a_malformed_document_is_one_line(tmp_path: Path, extra: str, problem: str) -> None:
    error, _ = _refused(_write(tmp_path, HEAD + extra))
    assert problem in error.problem and "\n" not in str(error), str(error)


def test_a_file_too_large_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_bytes(b"#" * (bounded_yaml.MAX_FILE_BYTES + 1))
    error, _ = _refused(path)
    assert f"more than the {bounded_yaml.MAX_FILE_BYTES}" in error.problem, str(error)


@pytest.mark.parametrize(
    ("rbac", "problem"),
    [
        ("gpu-node-1\n", "document 1 is a str, not a Kubernetes object"),
        ("apiVersion: v1\nkind: ServiceAccount\n", "document 1 has no metadata.name"),
        ("---\n", "holds no Kubernetes object"),
        ("kind: [\n", "not valid YAML"),
        (
            "a0: &a0 [x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 8)}]\n" for n in range(1, 9)),
            "alias bomb",
        ),
    ],
    ids=["hostname", "no-name", "empty", "syntax", "bomb"],
)
def test_an_rbac_file_that_holds_no_kubernetes_objects_is_one_line(tmp_path: Path, rbac: str, problem: str) -> None:
    error, _ = _refused(_write(tmp_path, HEAD, rbac=rbac))
    assert error.key_path == "identity.rbac[0]" and problem in error.problem, str(error)


def test_an_rbac_path_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD)
    (tmp_path / "rbac.yaml").unlink()
    (tmp_path / "rbac.yaml").mkdir()
    error, _ = _refused(path)
    assert error.key_path == "identity.rbac[0]" and "file not found" in error.problem, str(error)


def test_devices_per_node_has_a_maximum_checked_when_the_profile_is_read(tmp_path: Path) -> None:
    error, seconds = _refused(_write(tmp_path, HEAD.replace("perNode: 2", "perNode: 100000")))
    assert (error.line, error.key_path) == (9, "devices.perNode"), str(error)
    assert "100000 is greater than the maximum of 4096" in error.problem, str(error)
    assert seconds < LOAD_CPU_SECONDS, f"{seconds:.3f} s"


def test_a_local_cluster_has_a_maximum_of_nodes_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    code = main(["cluster", "up", "--nodes", str(MAX_LOCAL_NODES + 1), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and len(err.splitlines()) == 1, f"exit {code}: {err}"
    assert f"--nodes must be between 1 and {MAX_LOCAL_NODES} on a local cluster" in err, err
    assert not state.exists(), "the cluster's state directory was made"

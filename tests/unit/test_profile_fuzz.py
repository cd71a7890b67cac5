"""Property: any profile file, arbitrary YAML or a mutated shipped profile, is read or refused in one line, fast.

`load_profile` is what every command runs on `--profile` before anything starts; a UsageError from it is one line
on stderr and exit code 2 (`cli.main`), anything else would be a traceback. Each input is a file in a fresh
directory; the loader must return a profile or raise a one-line UsageError, within PER_INPUT_CPU_SECONDS.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_conformance import paths
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import UsageError

# The bound for one profile read, whatever the input (CPU time: the machine is shared).
PER_INPUT_CPU_SECONDS = 1.0
# Inputs per property: enough to reach odd types in every field of every shipped profile, a few seconds each.
EXAMPLES = 300

PROFILES = paths.fixtures_dir() / "profiles"
SHIPPED = sorted(
    path for path in [*PROFILES.glob("*.yaml"), *PROFILES.glob("*/*.yaml")] if not path.name.endswith("-rbac.yaml")
)
# Keys whose values name files relative to the profile's directory.
FILE_LISTS = (
    ("identity", "rbac"),
    ("identity", "controller", "rbac"),
    ("install", "images"),
    ("install", "manifests"),
    ("install", "previous", "images"),
    ("install", "previous", "manifests"),
)

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    database=None,
    deadline=None,  # timed in CPU seconds below: wall time on a shared machine says little
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True)
    | st.text(max_size=40)
    | st.sampled_from(["{data_dir}/..", "/etc/hostname", "../../x", "{node}", "{bin:etcd}", "\x00", "*a", "&a"])
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def _portable(source: Path) -> dict[str, Any]:
    """The shipped profile's data with its file names made absolute, and hostPaths to allow them, for any directory."""
    data: dict[str, Any] = yaml.safe_load(source.read_text())
    for keys in FILE_LISTS:
        owner: Any = data
        for key in keys[:-1]:
            owner = owner.get(key) if isinstance(owner, dict) else None
        if isinstance(owner, dict) and keys[-1] in owner:
            owner[keys[-1]] = [str((source.parent / name).resolve()) for name in owner[keys[-1]]]
    transform = data.get("install", {}).get("transform", {})
    if "kustomize" in transform:
        transform["kustomize"] = str((source.parent / transform["kustomize"]).resolve())
    data["hostPaths"] = [str(paths.fixtures_dir().parent.resolve()), str(paths.fixtures_dir().resolve())]
    return data


PORTABLE = {path.relative_to(PROFILES).as_posix(): _portable(path) for path in SHIPPED}


def _key_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _key_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _key_paths(value, (*prefix, index))
    return found


@st.composite
def _structural_mutation(draw: st.DrawFn) -> str:
    data = copy.deepcopy(PORTABLE[draw(st.sampled_from(sorted(PORTABLE)))])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        steps = draw(st.sampled_from(_key_paths(data)[1:]))
        owner: Any = data
        for step in steps[:-1]:
            owner = owner[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            del owner[steps[-1]]
        elif action == "add" and isinstance(owner, dict):
            owner[draw(st.text(max_size=12))] = draw(_values)
        else:
            owner[steps[-1]] = draw(_values)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))


@st.composite
def _textual_mutation(draw: st.DrawFn) -> str:
    text = yaml.safe_dump(PORTABLE[draw(st.sampled_from(sorted(PORTABLE)))], sort_keys=False)
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "insert", "truncate", "indent"]))
        if action == "delete" and len(lines) > 1:
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "insert":
            at = draw(st.integers(min_value=0, max_value=len(lines[index])))
            lines[index] = lines[index][:at] + draw(st.text(max_size=8)) + lines[index][at:]
        elif action == "truncate":
            lines = lines[: index + 1]
        else:
            lines[index] = " " * draw(st.integers(min_value=1, max_value=3)) + lines[index]
    return "".join(lines)


_arbitrary_yaml = _values.map(lambda value: yaml.safe_dump(value, allow_unicode=True)) | st.text(max_size=300)


def _check(directory: Path, text: str, timings: list[float]) -> None:
    directory.mkdir()
    path = directory / "profile.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    began = time.process_time()
    try:
        load_profile(path)
    except UsageError as refused:
        message = str(refused)
        assert message and "\n" not in message, f"not one line: {message!r}\ninput:\n{text}"
    finally:
        timings.append(time.process_time() - began)
    assert timings[-1] < PER_INPUT_CPU_SECONDS, f"{timings[-1]:.3f} s of CPU for input:\n{text}"


def _run_property(strategy: st.SearchStrategy[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[float]:
    timings: list[float] = []
    numbers = itertools.count()

    @FUZZ_SETTINGS
    @given(text=strategy)
    def holds(text: str) -> None:
        _check(tmp_path / str(next(numbers)), text, timings)

    holds()
    with capsys.disabled():
        print(f"\n{len(timings)} inputs, slowest {max(timings):.3f} s of CPU")
    return timings


PROPERTIES: dict[str, Callable[[], st.SearchStrategy[str]]] = {
    "arbitrary-yaml": lambda: _arbitrary_yaml,
    "structural-mutation-of-shipped": _structural_mutation,
    "textual-mutation-of-shipped": _textual_mutation,
}


@pytest.mark.parametrize("kind", sorted(PROPERTIES))
def test_any_profile_is_read_or_refused_in_one_line_within_a_second(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timings = _run_property(PROPERTIES[kind](), tmp_path, capsys)
    assert len(timings) >= EXAMPLES // 2, f"only {len(timings)} inputs ran"


def test_every_shipped_profile_loads_from_anywhere_once_portable(tmp_path: Path) -> None:
    """The mutations start from valid profiles: else they would fuzz only the first error."""
    for name, data in PORTABLE.items():
        directory = tmp_path / name.replace("/", "-")
        directory.mkdir()
        (directory / "profile.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        load_profile(directory / "profile.yaml")

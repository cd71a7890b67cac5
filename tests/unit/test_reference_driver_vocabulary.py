"""The names the engine and the mutation harness give the reference driver's faults and broken modes are its own.

The Go build (drivers/fake-dra-go) implements them: faults.go the faults its control socket switches, broken.go
the modes it starts broken in. The engine's FAULT_SCHEMA and the harness's BrokenMode name them ahead of time.
"""

from __future__ import annotations

import re

from dra_conformance import paths
from dra_conformance.driver.faults import FAULT_SCHEMA, MODES
from tests.mutants.broken_modes import BrokenMode

GO_MODULE = paths.reference_driver_go_module()


def _go_block(file: str, start: str) -> str:
    """The body of the Go declaration of `file` that begins with `start`, up to its closing brace."""
    found = re.search(re.escape(start) + r"(.*?)\n[})]", (GO_MODULE / file).read_text(), re.DOTALL)
    assert found, f"{file}: no `{start}`"
    return found.group(1)


def test_the_fault_schema_names_the_modes_the_go_build_accepts() -> None:
    go_modes = set(re.findall(r'"([a-z-]+)": true', _go_block("faults.go", "var faultModes = map[string]bool{")))
    assert go_modes == set(MODES) == set(FAULT_SCHEMA["properties"]["mode"]["enum"])


def test_the_fault_schema_names_the_fields_of_the_go_builds_fault() -> None:
    go_fields = set(re.findall(r'`json:"([a-z]+)', _go_block("faults.go", "type Fault struct {")))
    assert go_fields == set(FAULT_SCHEMA["properties"])


def test_every_broken_mode_the_harness_names_is_one_the_go_build_starts_in() -> None:
    constants = dict(
        re.findall(r"^\t(\w+)\s*=\s*\"([a-z0-9-]+)\"", (GO_MODULE / "broken.go").read_text(), re.MULTILINE)
    )
    listed = {
        constants[name]
        for name in re.findall(r"\w+", _go_block("broken.go", "var brokenModes = []string{"))
        if name in constants
    }
    assert set(BrokenMode) <= listed, f"not modes of the Go build: {sorted(set(BrokenMode) - listed)}"

"""The main distribution lists every package of the engine and the suites (its package list is explicit)."""

from __future__ import annotations

import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def _listed() -> set[str]:
    settings = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(settings["packages"])


def _packages(directory: str, name: str) -> set[str]:
    root = CHECKOUT / directory
    return {
        ".".join([name, *init.parent.relative_to(root).parts])
        for init in root.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def test_every_package_of_the_engine_and_the_suites_is_in_the_wheel() -> None:
    packages = _packages("dra_conformance", "dra_conformance") | _packages("suites", "dra_conformance.suites")
    missing = sorted(packages - _listed())
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: the wheel would not ship them"

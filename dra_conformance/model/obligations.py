"""The obligations checks verify, loaded from the registry that ships with the package.

An obligation is one statement about the driver, the cluster or the metrics API, with one basis:

- *contract*: what the API, its comments or the kubelet's documented behaviour require; a violation fails;
- *defensive*: what users want beyond the contract; a violation is an advisory, a failure only under `strict`;
- *harness*: a precondition of our own; when it does not hold the check errors, never as the driver's failure.

The registry is YAML data (`registry/<suite>.yaml`, one file per suite, plus `fields.yaml`: every field a driver
produces, for the coverage table). Every contract obligation cites upstream source text a test can resolve: module,
version, path, line and a quoted phrase that must be at or near that line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

REGISTRY_PACKAGE = "dra_conformance.model"
REGISTRY_DIR = "registry"
FIELDS_FILE = "fields.yaml"
# `<suite>.<words-joined-by-dashes>`: stable, greppable, and names the suite that owns it.
OBLIGATION_ID = re.compile(r"^[a-z]+\.[a-z0-9]+(-[a-z0-9]+)*$")
OBLIGATION_KEYS = {"id", "statement", "basis", "capability", "fields", "sources", "why"}
CITATION_KEYS = {"module", "version", "path", "line", "quote"}


class Basis(StrEnum):
    """Where an obligation comes from, which decides what a violation means."""

    CONTRACT = "contract"
    DEFENSIVE = "defensive"
    HARNESS = "harness"


class RegistryError(ValueError):
    """The registry data does not validate (a packaging or editing mistake, named with file and entry)."""


@dataclass(frozen=True)
class Citation:
    """Upstream source text an obligation rests on: `quote` is at or near `line` of `path` in `module@version`."""

    module: str
    version: str
    path: str
    line: int
    quote: str

    def __str__(self) -> str:
        return f'{self.module}@{self.version} {self.path}:{self.line} "{self.quote}"'


@dataclass(frozen=True)
class Obligation:
    """One statement a check makes, with its basis and why it is one."""

    id: str
    statement: str
    basis: Basis
    suite: str
    capability: str | None = None
    fields: tuple[str, ...] = ()
    sources: tuple[Citation, ...] = ()
    why: str = ""

    def rationale(self) -> str:
        """Why this is an obligation: its citations, then the stated reason."""
        parts = [str(source) for source in self.sources]
        if self.why:
            parts.append(self.why)
        return "; ".join(parts)


@dataclass(frozen=True)
class FieldEntry:
    """A field a driver produces; `uncovered` says why no obligation checks it, where none does."""

    name: str
    area: str
    uncovered: str = ""


@dataclass
class Registry:
    """Every obligation by id, and the fields a driver produces."""

    obligations: dict[str, Obligation]
    fields: dict[str, FieldEntry] = field(default_factory=dict)

    def __getitem__(self, obligation_id: str) -> Obligation:
        try:
            return self.obligations[obligation_id]
        except KeyError:
            raise KeyError(f"obligation {obligation_id!r} is not in the registry ({REGISTRY_DIR}/*.yaml)") from None

    def __iter__(self) -> Iterator[Obligation]:
        return iter(sorted(self.obligations.values(), key=lambda o: o.id))

    def __len__(self) -> int:
        return len(self.obligations)

    def checking(self, field_name: str) -> list[Obligation]:
        """The obligations that check `field_name`."""
        return [o for o in self if field_name in o.fields]

    @classmethod
    def load(cls, directory: Path | None = None) -> Registry:
        """The registry in `directory`, by default the one shipped in the package."""
        root = directory or Path(str(resources.files(REGISTRY_PACKAGE) / REGISTRY_DIR))
        obligations: dict[str, Obligation] = {}
        for path in sorted(root.glob("*.yaml")):
            if path.name == FIELDS_FILE:
                continue
            for obligation in _parse_suite(path):
                if obligation.id in obligations:
                    raise RegistryError(f"{path.name}: obligation {obligation.id} is defined twice")
                obligations[obligation.id] = obligation
        fields_path = root / FIELDS_FILE
        fields = _parse_fields(fields_path) if fields_path.exists() else {}
        registry = cls(obligations, fields)
        registry._check_fields()
        return registry

    def _check_fields(self) -> None:
        if not self.fields:
            return
        for obligation in self:
            unknown = [name for name in obligation.fields if name not in self.fields]
            if unknown:
                raise RegistryError(f"{obligation.id}: fields not in {FIELDS_FILE}: {unknown}")


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise RegistryError(f"{path.name}: not YAML: {error}") from None


def _parse_suite(path: Path) -> Iterable[Obligation]:
    suite = path.stem
    entries = _load_yaml(path)
    if not isinstance(entries, list):
        raise RegistryError(f"{path.name}: a list of obligations is expected")
    for index, entry in enumerate(entries):
        where = f"{path.name}[{index}]"
        if not isinstance(entry, dict):
            raise RegistryError(f"{where}: an obligation is a mapping")
        unknown = set(entry) - OBLIGATION_KEYS
        if unknown:
            raise RegistryError(f"{where}: unknown keys {sorted(unknown)}")
        obligation_id = str(entry.get("id", ""))
        where = f"{path.name}: {obligation_id or where}"
        if not OBLIGATION_ID.match(obligation_id) or not obligation_id.startswith(f"{suite}."):
            raise RegistryError(f"{where}: an id is '{suite}.<words-with-dashes>'")
        try:
            basis = Basis(str(entry.get("basis")))
        except ValueError:
            raise RegistryError(f"{where}: basis is one of {[str(b) for b in Basis]}") from None
        sources = tuple(_citation(where, raw) for raw in entry.get("sources") or [])
        why = str(entry.get("why") or "").strip()
        if basis == Basis.CONTRACT and not sources:
            raise RegistryError(f"{where}: a contract obligation cites upstream source text (sources)")
        if basis != Basis.CONTRACT and not (sources or why):
            raise RegistryError(f"{where}: a {basis} obligation says why it is one (why, or sources)")
        if not str(entry.get("statement") or "").strip():
            raise RegistryError(f"{where}: statement is required")
        yield Obligation(
            id=obligation_id,
            statement=str(entry["statement"]).strip(),
            basis=basis,
            suite=suite,
            capability=entry.get("capability"),
            fields=tuple(entry.get("fields") or ()),
            sources=sources,
            why=why,
        )


def _citation(where: str, raw: Any) -> Citation:
    if not isinstance(raw, dict) or set(raw) != CITATION_KEYS:
        raise RegistryError(f"{where}: a source has exactly the keys {sorted(CITATION_KEYS)}: {raw}")
    if not isinstance(raw["line"], int) or raw["line"] < 1:
        raise RegistryError(f"{where}: a source's line is a positive number: {raw}")
    return Citation(str(raw["module"]), str(raw["version"]), str(raw["path"]), raw["line"], str(raw["quote"]))


def _parse_fields(path: Path) -> dict[str, FieldEntry]:
    document = _load_yaml(path)
    if not isinstance(document, dict):
        raise RegistryError(f"{path.name}: a mapping of area -> fields is expected")
    fields: dict[str, FieldEntry] = {}
    for area, entries in document.items():
        for entry in entries or []:
            name, uncovered = (entry, "") if isinstance(entry, str) else (entry.get("field"), entry.get("uncovered"))
            if not name:
                raise RegistryError(f"{path.name}: {area}: entry without a field name: {entry}")
            fields[str(name)] = FieldEntry(str(name), str(area), str(uncovered or ""))
    return fields


class ObligationFailed(AssertionError):
    """An obligation did not hold: a contract one, or a defensive one under strict (the driver's finding)."""

    def __init__(self, obligation: Obligation, message: str) -> None:
        """`message` says which obligation broke, why it is one and what was observed."""
        super().__init__(message)
        self.obligation = obligation


class HarnessPreconditionFailed(Exception):
    """A precondition of the suite did not hold: the check could not judge the driver (an error, not a failure)."""

    def __init__(self, obligation: Obligation, message: str) -> None:
        """`message` says which precondition broke and what was observed."""
        super().__init__(message)
        self.obligation = obligation


def violation_message(obligation: Obligation, observed: Any, where: str = "") -> str:
    """What a vendor reads when `obligation` broke: which one, why it is one, what was observed."""
    subject = f"{where}: " if where else ""
    return (
        f"{obligation.basis} obligation {obligation.id} broke: {subject}{obligation.statement}\n"
        f"  why it is one: {obligation.rationale()}\n"
        f"  observed: {observed}"
    )

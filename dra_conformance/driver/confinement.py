"""Where a profile may make the tool read, create and delete: its own directory, the run's directories, `hostPaths`.

A profile names files the tool reads (`identity.rbac`, `install.images`, `install.manifests`, the kustomize overlay),
programs it starts (`run.command`) and directories it creates before each start (`run.createDirs`; a driver swap
deletes only those that did not exist before, see `make_directories`). Each must lie inside the profile's directory
(relative paths) or, for templates, inside one of the run's own directories (`{data_dir}`, `{plugins_dir}`, ...),
once `..` is resolved (lexically: links the vendor put in the profile's directory are the vendor's). Anything else,
an absolute path above all, needs an entry of the profile's `hostPaths`, which the CLI prints at start.

The check runs on the profile's text, before any cluster starts; `check_rendered` checks the rendered directories
again against the values the backend filled in.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra_conformance.errors import UsageError
from dra_conformance.schema_errors import KeyPath

HOST_PATHS_KEY = "hostPaths"
# The placeholders that stand for directories the run makes for each node (and removes with the cluster).
RUN_DIRECTORIES = ("data_dir", "plugins_dir", "registrar_dir", "cdi_dir", "kubelet_root")
# Placeholders that stand for one path component of the run's own naming (no `/`, never `..`).
COMPONENTS = ("node", "driver", "devices")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z0-9_.-]*)?\}")
# What a component placeholder is replaced by while a template's shape is checked.
_COMPONENT_STAND_IN = "x"
# Where a run directory placeholder is rooted while a template's shape is checked.
_RUN_ROOT = "/run-directory"


def inside(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or below it (both absolute and normalized)."""
    return path == root or root in path.parents


def _normalized(path: str) -> Path:
    return Path(posixpath.normpath(path))


def host_paths(raw: Mapping[str, Any], directory: Path) -> tuple[Path, ...]:
    """The profile's `hostPaths`, absolute (relative entries against the profile's directory), normalized."""
    return tuple(_normalized(str(directory / entry)) for entry in raw.get(HOST_PATHS_KEY, ()))


def _allowed(path: Path, roots: Iterable[Path]) -> bool:
    return any(inside(path, root) for root in roots)


def _escape(path: Path, where: str) -> str:
    return f"{path} is outside {where}; list it (or a directory above it) under {HOST_PATHS_KEY} to allow it"


def _file_problem(relative: str, directory: Path, hosts: Sequence[Path]) -> str | None:
    """Why the profile may not name file `relative`; None if it may (inside its directory or hostPaths).

    Lexical, `..` resolved: links the vendor put in the profile's directory are the vendor's to place.
    """
    if "\0" in relative:
        return "a path holds no NUL character"
    path = _normalized(str(directory / relative))
    return None if _allowed(path, [directory, *hosts]) else _escape(path, f"the profile's directory {directory}")


class _Unsafe(ValueError):
    """A template uses a placeholder where it could stand for anything."""


def _shape(text: str, template: str) -> str:
    """`text` with the component placeholders replaced by a stand-in; _Unsafe if another placeholder sits in it."""
    for match in _PLACEHOLDER.finditer(text):
        if match.group(0)[1:-1] not in COMPONENTS:
            raise _Unsafe(
                f"{template!r}: {match.group(0)} may not stand inside a directory to create; it starts with "
                f"{' or '.join(f'{{{name}}}' for name in RUN_DIRECTORIES)}, or is an absolute path under "
                f"{HOST_PATHS_KEY}, and only {', '.join(f'{{{name}}}' for name in COMPONENTS)} may be used within"
            )
    return _PLACEHOLDER.sub(_COMPONENT_STAND_IN, text)


def _directory_problem(template: str, hosts: Sequence[Path]) -> str | None:
    """Why `createDirs` entry `template` may leave the run's directories and hostPaths; None if it cannot."""
    if "\0" in template:
        return "a path holds no NUL character"
    leading = _PLACEHOLDER.match(template)
    try:
        if leading is not None and leading.group(0)[1:-1] in RUN_DIRECTORIES:
            rest = template[leading.end() :]
            if rest and not rest.startswith("/"):
                return f"{template!r}: a run directory placeholder ends its path or is followed by `/`"
            if inside(_normalized(_RUN_ROOT + _shape(rest, template)), Path(_RUN_ROOT)):
                return None
            return (
                f"{template!r} leaves {leading.group(0)} through `..`; a host directory is named by its absolute path, "
                f"listed under {HOST_PATHS_KEY}"
            )
        shape = _shape(template, template)
    except _Unsafe as unsafe:
        return str(unsafe)
    if not shape.startswith("/"):
        return (
            f"{template!r}: a directory to create starts with "
            f"{' or '.join(f'{{{name}}}' for name in RUN_DIRECTORIES)}, or is an absolute path under {HOST_PATHS_KEY}"
        )
    path = _normalized(shape)
    if _allowed(path, hosts):
        return None
    return _escape(path, f"the run's directories ({', '.join(f'{{{name}}}' for name in RUN_DIRECTORIES)})")


def _program_problem(word: str, hosts: Sequence[Path]) -> str | None:
    """Why the program `word` (a command's first word) may not run; placeholders and names on PATH may."""
    if "\0" in word:
        return "a path holds no NUL character"
    if _PLACEHOLDER.match(word) or "/" not in word:
        return None  # {python}, {bin:...} (the engine's own builds), or a name looked up on PATH
    path = _normalized(word)
    if not word.startswith("/"):
        return f"{word!r} leaves the working directory" if path.parts[:1] == ("..",) else None
    return None if _allowed(path, hosts) else _escape(path, "the engine's builds and the PATH")


def problems(raw: Mapping[str, Any], directory: Path) -> Iterator[tuple[KeyPath, str]]:
    """Every path of the (schema-valid) profile `raw` that leaves its places, with its key path.

    `directory`: the profile's directory, absolute.
    """
    hosts = host_paths(raw, directory)
    for index, entry in enumerate(raw.get(HOST_PATHS_KEY, ())):
        if "\0" in entry:
            yield [HOST_PATHS_KEY, index], "a path holds no NUL character"
        elif hosts[index] == Path("/"):
            yield [HOST_PATHS_KEY, index], "the whole file system (/) is not a host path; name the directories"
    identity = raw["identity"]
    files: list[tuple[KeyPath, str]] = [
        (["identity", "rbac", i], name) for i, name in enumerate(identity.get("rbac", []))
    ]
    controller = identity.get("controller", {})
    files += [(["identity", "controller", "rbac", i], name) for i, name in enumerate(controller.get("rbac", []))]
    install = raw.get("install", {})
    for key in ("images", "manifests"):
        files += [(["install", key, i], name) for i, name in enumerate(install.get(key, []))]
        previous = install.get("previous", {})
        files += [(["install", "previous", key, i], name) for i, name in enumerate(previous.get(key, []))]
    if "kustomize" in install.get("transform", {}):
        files.append((["install", "transform", "kustomize"], install["transform"]["kustomize"]))
    for steps, name in files:
        problem = _file_problem(name, directory, hosts)
        if problem is not None:
            yield steps, problem
    run = raw.get("run")
    if run is None:
        return
    for index, template in enumerate(run.get("createDirs", [])):
        problem = _directory_problem(template, hosts)
        if problem is not None:
            yield ["run", "createDirs", index], problem
    commands: list[tuple[KeyPath, Any]] = [(["run", "command", 0], run["command"])]
    commands += [
        (["run", "versions", name, "command", 0], v.get("command")) for name, v in run.get("versions", {}).items()
    ]
    for steps, command in commands:
        problem = _program_problem(command[0], hosts) if command else None
        if problem is not None:
            yield steps, problem


# The run directories a `health` hook's file may lie in (this machine's view of the node's), and the placeholders
# that stand for one path component within it.
HOOK_FILE_DIRECTORIES = ("plugins_dir", "kubelet_root")
HOOK_COMPONENTS = ("node", "driver", "device", "pool")


def _hook_file_problem(template: str, hosts: Sequence[Path]) -> str | None:
    """Why a hook's file `template` may leave the node's plugins dir or kubelet root and hostPaths; None if not."""
    if "\0" in template:
        return "a path holds no NUL character"
    leading = _PLACEHOLDER.match(template)
    rest = template[leading.end() :] if leading is not None else template
    unsafe = [m.group(0) for m in _PLACEHOLDER.finditer(rest) if m.group(0)[1:-1] not in HOOK_COMPONENTS]
    if unsafe:
        return (
            f"{template!r}: {unsafe[0]} may not stand inside a hook's file path; only "
            f"{', '.join(f'{{{name}}}' for name in HOOK_COMPONENTS)} may be used within"
        )
    shape = _PLACEHOLDER.sub(_COMPONENT_STAND_IN, rest)
    if leading is not None and leading.group(0)[1:-1] in HOOK_FILE_DIRECTORIES:
        if rest and not rest.startswith("/"):
            return f"{template!r}: a directory placeholder ends its path or is followed by `/`"
        if inside(_normalized(_RUN_ROOT + shape), Path(_RUN_ROOT)):
            return None
        return f"{template!r} leaves {leading.group(0)} through `..`; name a host file by its absolute path"
    if leading is not None and leading.start() == 0:
        return (
            f"{template!r}: a hook's file starts with {' or '.join(f'{{{n}}}' for n in HOOK_FILE_DIRECTORIES)}, or "
            f"is an absolute path under {HOST_PATHS_KEY}"
        )
    if not shape.startswith("/"):
        return f"{template!r}: a hook's file is absolute, or starts with a directory placeholder"
    path = _normalized(shape)
    return None if _allowed(path, hosts) else _escape(path, "the node's plugins dir and kubelet root")


def hook_problems(
    hook: Mapping[str, Any], steps: KeyPath, raw: Mapping[str, Any], directory: Path
) -> Iterator[tuple[KeyPath, str]]:
    """Where a `health` hook of profile `raw` may leave its places: its program, the file it writes or removes."""
    hosts = host_paths(raw, directory)
    if "command" in hook:
        problem = _program_problem(hook["command"][0], hosts)
        if problem is not None:
            yield [*steps, "command", 0], problem
    for key, path in (("writeFile", hook.get("writeFile", {}).get("path")), ("removeFile", hook.get("removeFile"))):
        problem = _hook_file_problem(path, hosts) if path is not None else None
        if problem is not None:
            yield [*steps, key], problem


def host_paths_of_copy(raw: Mapping[str, Any], source_directory: Path) -> list[str]:
    """The `hostPaths` of a copy of profile `raw` (from `source_directory`) whose file names were made absolute.

    The directories of those files, and the original's own host paths made absolute: a copy written elsewhere (a
    test's, a benchmark's) still names only what the original could.
    """
    identity = raw.get("identity", {})
    install = raw.get("install", {})
    named = [
        *identity.get("rbac", []),
        *identity.get("controller", {}).get("rbac", []),
        *install.get("images", []),
        *install.get("manifests", []),
        *install.get("previous", {}).get("images", []),
        *install.get("previous", {}).get("manifests", []),
        *([install["transform"]["kustomize"]] if "kustomize" in install.get("transform", {}) else []),
    ]
    directories = {str(_normalized(str(source_directory / entry))) for entry in raw.get(HOST_PATHS_KEY, [])}
    directories |= {str(Path(name).parent) for name in named if Path(name).is_absolute()}
    return sorted(directories)


def host_paths_line(source: Path, hosts: Sequence[Path]) -> str | None:
    """The line printed at start when a profile reaches outside its places; None when it does not."""
    if not hosts:
        return None
    return f"profile {source}: host paths outside its directory and the run's: {', '.join(map(str, hosts))}"


def check_rendered(directories: Iterable[Path], roots: Iterable[Path], source: Path) -> None:
    """Refuse a rendered directory outside `roots` (the node's run directories and the host paths)."""
    allowed = [_normalized(os.fspath(root)) for root in roots]
    for directory in directories:
        if not _allowed(_normalized(os.fspath(directory)), allowed):
            raise UsageError(f"{source}: run.createDirs: {_escape(_normalized(os.fspath(directory)), 'the run')}")


def make_directories(directories: Iterable[Path]) -> tuple[Path, ...]:
    """Create each directory (and its parents); return those that did not exist before, the only ones to delete."""
    created = []
    for directory in directories:
        if not directory.exists():
            created.append(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"create directory {directory}: {error.strerror or error}") from None
    return tuple(created)

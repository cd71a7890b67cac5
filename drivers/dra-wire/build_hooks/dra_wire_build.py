"""dra-wire's build backend: setuptools, plus a build step that compiles the kubelet plugin API bindings.

The step (`build_kubelet_api`, a sub-command of `build`) reads the pinned .proto files (kubelet_protos) and compiles
them with grpcio-tools (messages and services) and mypy-protobuf (their .pyi) into the subpackage
`dra_wire.kubeletapi`: into the wheel for a normal build, into the source tree for an editable install (which
imports dra_wire from there). Both tools are build requirements only.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from importlib import resources
from pathlib import Path

from kubelet_protos import Pin, ProtoSourceError, read_protos
from setuptools import Command
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)
from setuptools.command.build import build
from setuptools.errors import BaseError

__all__ = [
    "Build",
    "BuildKubeletAPI",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

HOOKS = Path(__file__).resolve().parent
# The package the bindings go into, and the file that pins what they are compiled from.
TOP_PACKAGE = "dra_wire"
PIN_MODULE = "kubelet_pin.py"


# setuptools ships no type information: its classes are Any here, hence the ignores on subclassing them.
class BindingsBuildError(BaseError):  # type: ignore[misc]
    """A build failure setuptools reports as one `error: ...` line, without a traceback."""


def _plugin(name: str) -> str:
    """Path of a protoc plugin executable installed with a build requirement (mypy-protobuf's)."""
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        raise BindingsBuildError(f"{name} not found: install mypy-protobuf in the build environment")
    return found


def compile_bindings(protos: dict[str, bytes], package: str, out: Path) -> None:
    """Compile `protos` (path under `package` -> content) into `out`/<package>, every directory a package.

    `package` is a dotted name: the generated modules import each other by it, and the .proto names they register
    start with it.
    """
    package_dir = package.replace(".", "/")
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory(prefix="kubelet-protos-") as scratch:
        staged = Path(scratch)
        for dest, content in protos.items():
            (staged / package_dir / dest).parent.mkdir(parents=True, exist_ok=True)
            (staged / package_dir / dest).write_bytes(content)
        names = [f"{package_dir}/{dest}" for dest in protos]
        well_known = resources.files("grpc_tools") / "_proto"
        code = protoc.main(
            [
                "protoc",
                f"-I{staged}",
                f"-I{well_known}",
                f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
                f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                f"--mypy_out={out}",
                f"--mypy_grpc_out={out}",
                *names,
            ]
        )
    if code != 0:
        raise BindingsBuildError(f"compile the kubelet plugin APIs with grpc_tools.protoc: exit code {code}")
    for name in names:
        directory = (out / name).parent
        while directory != (out / package_dir).parent:
            (directory / "__init__.py").touch()
            directory = directory.parent


class BuildKubeletAPI(Command):  # type: ignore[misc]
    """Compile the kubelet plugin API bindings into dra_wire.kubeletapi."""

    description = "compile the kubelet plugin API bindings from the pinned k8s.io/kubelet .proto files"
    user_options: list[tuple[str, str | None, str]] = []  # noqa: RUF012 (distutils reads it as a class attribute)

    def initialize_options(self) -> None:
        """No options; where to write comes from build_py."""
        self.build_lib: str | None = None
        self.editable_mode = False
        self._outputs: list[str] = []

    def finalize_options(self) -> None:
        """Write next to the modules build_py copies."""
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _source_dir(self) -> Path:
        build_py = self.get_finalized_command("build_py")
        return Path(build_py.get_package_dir(TOP_PACKAGE))

    def run(self) -> None:
        """Fetch and check the protos, compile them, and put the subpackage in place (replacing an old one)."""
        pin = Pin.read(self._source_dir() / PIN_MODULE)
        try:
            protos, origin = read_protos(pin, os.environ)
        except ProtoSourceError as error:
            raise BindingsBuildError(f"dra-wire: kubelet plugin API bindings: {error}") from None
        print(f"dra-wire: compiling {len(protos)} kubelet plugin APIs of {pin.target} from {origin}", file=sys.stderr)
        # Editable installs import dra_wire from the source tree, so the bindings go there (git ignores them).
        parent = self._source_dir() if self.editable_mode else Path(str(self.build_lib)) / TOP_PACKAGE
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".kubeletapi-", dir=parent) as scratch:
            compile_bindings(protos, f"{TOP_PACKAGE}.{pin.package}", Path(scratch))
            target = parent / pin.package
            shutil.rmtree(target, ignore_errors=True)
            (Path(scratch) / TOP_PACKAGE / pin.package).rename(target)
        self._outputs = [str(path) for path in sorted(target.rglob("*")) if path.is_file()]

    def get_outputs(self) -> list[str]:
        """The files written (setuptools' sub-command protocol)."""
        return list(self._outputs)

    def get_output_mapping(self) -> dict[str, str]:
        """No output is a copy of a source file."""
        return {}

    def get_source_files(self) -> list[str]:
        """What an sdist needs to run this step again: the hooks themselves (the pin is in the package)."""
        return [str(path.relative_to(Path.cwd())) for path in sorted(HOOKS.glob("*.py"))]


class Build(build):  # type: ignore[misc]
    """setuptools' build, with the bindings compiled after the modules are copied."""

    sub_commands = [*build.sub_commands, ("build_kubelet_api", None)]  # noqa: RUF012 (distutils' own shape)

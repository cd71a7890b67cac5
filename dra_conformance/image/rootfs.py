"""The Debian root filesystem of an image: mmdebstrap (as root) into a directory, pip from wheels in its chroot.

Everything happens in a scratch directory that is removed afterwards, also when the build fails or is
interrupted; mmdebstrap mounts /dev, /proc and /sys inside it while its hooks run, so those are unmounted before
anything is deleted, and a directory still holding a mount is left alone with one line saying where.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_conformance.errors import UsageError

# mmdebstrap downloads ~40 MB of packages and installs them; pip installs ~40 wheels. Minutes on a slow mirror;
# twenty guard a hung one.
MMDEBSTRAP_TIMEOUT = 1200.0
# After Ctrl-C, mmdebstrap's own handler unmounts and removes what it made; this long is given to it.
INTERRUPT_GRACE = 30.0
# Files whose content depends on when or where the build ran, removed after mmdebstrap's own reproducible cleanup.
VOLATILE = (
    "var/cache/ldconfig/aux-cache",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/diversions-old",
    "var/lib/dpkg/statoverride-old",
    "var/cache/debconf/config.dat-old",
    "var/cache/debconf/templates.dat-old",
    "var/lib/apt/extended_states",
)
# Files mmdebstrap copies from the host: emptied (their names stay, as the runtime's mount points).
HOST_FILES = ("etc/resolv.conf", "etc/hostname")
# Directories whose content is emptied (their own entry stays).
EMPTIED = ("var/log", "var/cache/apt", "var/lib/apt/lists", "tmp", "root/.cache")
# Inside the chroot: the wheels are copied here, and removed by the last hook.
CHROOT_WHEELS = "/tmp/dra-conformance-wheels"


def mmdebstrap_command(
    *,
    suite: str,
    variant: str,
    packages: Iterable[str],
    dpkg_options: Iterable[str],
    apt_options: Iterable[str] = (),
    hook_dirs: Iterable[str] = (),
    sources: Iterable[str],
    target: Path,
    wheels: Path,
    pip_wheel: str,
    install: str,
    source_date_epoch: int,
) -> list[str]:
    """The mmdebstrap command that writes the root filesystem into `target` and pip-installs `install` from `wheels`.

    pip runs from its own wheel (it is not installed into the image) with the image's python3, offline, from the
    wheels copied in; SOURCE_DATE_EPOCH makes its bytecode hash-checked and PYTHONHASHSEED=0 makes it stable.
    """
    pip = (
        f'chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root SOURCE_DATE_EPOCH={source_date_epoch}'
        f" PYTHONHASHSEED=0 python3 {CHROOT_WHEELS}/{pip_wheel}/pip install --no-index --find-links {CHROOT_WHEELS}"
        " --no-cache-dir --break-system-packages --disable-pip-version-check --root-user-action=ignore"
        f" --no-warn-script-location --quiet {shlex.quote(install)}"
    )
    return [
        "mmdebstrap",
        "--mode=root",
        f"--variant={variant}",
        "--format=directory",
        f"--include={','.join(packages)}",
        *(f"--aptopt={option}" for option in apt_options),
        *(f"--hook-dir={directory}" for directory in hook_dirs),
        *(f"--dpkgopt={option}" for option in dpkg_options),
        f'--customize-hook=mkdir -p "$1{CHROOT_WHEELS}" && cp {shlex.quote(str(wheels))}/*.whl "$1{CHROOT_WHEELS}/"',
        f"--customize-hook={pip}",
        f'--customize-hook=rm -rf "$1{CHROOT_WHEELS}"',
        suite,
        str(target),
        *sources,
    ]


def run_logged(command: list[str], log: Path, environment: dict[str, str], timeout: float) -> int:
    """Run `command` with its output appended to `log`; return its exit code.

    When this process is interrupted (Ctrl-C, SIGTERM, a failure), the child's process group gets SIGTERM and its
    grace time to clean up (mmdebstrap unmounts what it mounted) before all of it is killed: nothing it started
    outlives the build.
    """
    with log.open("a") as stream:
        stream.write(f"$ {shlex.join(command)}\n")
        stream.flush()
        # Its own process group: mmdebstrap runs apt and dpkg in the chroot, and none may outlive it (a dpkg still
        # writing into the root filesystem would race its removal).
        process = subprocess.Popen(
            command,
            stdout=stream,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
        )
        try:
            return process.wait(timeout=timeout)
        except BaseException:
            _stop_group(process)
            raise


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, its grace time, then SIGKILL to whatever of the group is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=INTERRUPT_GRACE)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@dataclass(frozen=True)
class Step:
    """How a logged build step is named when it fails, and what in its log means the network is the cause."""

    # "<failed> failed (log: ...)" and "<timed_out> did not finish in ...".
    failed: str
    timed_out: str
    # Lines of its log that mean a server is unreachable, and what to tell the user then.
    unreachable: tuple[str, ...] = ()
    unreachable_hint: str = ""


def run_step(step: Step, command: list[str], log: Path, environment: dict[str, str], timeout: float) -> None:
    """Run `command` (`run_logged`); a failure is one line with the log's tail and, where it shows, what to do."""
    try:
        code = run_logged(command, log, environment, timeout)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{step.timed_out} did not finish in {timeout:g}s (log: {log})") from None
    if code != 0:
        text = log.read_text(errors="replace")
        tail = " ".join(text.split()[-40:])
        hint = step.unreachable_hint if any(sign in text for sign in step.unreachable) else ""
        raise UsageError(f"{hint}{step.failed} failed (log: {log}): {tail}")


MMDEBSTRAP = Step(
    "mmdebstrap",
    "mmdebstrap",
    ("Failed to fetch", "Could not resolve", "Temporary failure resolving"),
    "the Debian mirror (deb.debian.org) is unreachable from here; make it reachable, then retry: ",
)


def run_mmdebstrap(command: list[str], log: Path, environment: dict[str, str]) -> None:
    """Run `command`, its output to `log`; a failure is one line with the log's tail and what to do."""
    run_step(MMDEBSTRAP, command, log, environment, MMDEBSTRAP_TIMEOUT)


def scrub(rootfs: Path) -> None:
    """Remove what records when or where the build ran (logs, caches, backup copies of dpkg's databases)."""
    for relative in VOLATILE:
        (rootfs / relative).unlink(missing_ok=True)
    for relative in EMPTIED:
        directory = rootfs / relative
        if not directory.is_dir():
            continue
        for child in directory.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    # Copied from the build host; the container runtime mounts its own over them.
    for relative in HOST_FILES:
        if (rootfs / relative).is_file():
            (rootfs / relative).write_text("")


def installed_packages(rootfs: Path) -> list[str]:
    """`name=version` of every Debian package dpkg recorded as installed in `rootfs`."""
    status = rootfs / "var" / "lib" / "dpkg" / "status"
    packages, name, version, installed = [], "", "", False
    for line in [*status.read_text().splitlines(), ""]:
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line.startswith("Version: "):
            version = line.split(": ", 1)[1]
        elif line.startswith("Status: "):
            installed = line.endswith(" installed")
        elif not line:
            if name and installed:
                packages.append(f"{name}={version}")
            name, version, installed = "", "", False
    return sorted(packages)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below `directory`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(directory.resolve())
    points = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def remove_scratch(directory: Path) -> None:
    """Unmount whatever is still mounted below `directory`, then delete it; never delete through a mount."""
    if not directory.exists():
        return
    for point in mounts_under(directory):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    left = mounts_under(directory)
    if left:
        raise UsageError(f"{directory} still has mounts ({', '.join(left)}): unmount them, then remove it")
    try:
        shutil.rmtree(directory)
    except OSError as error:
        raise UsageError(f"could not remove the build's scratch directory {directory} ({error}): remove it") from None


@contextmanager
def scratch_directory(parent: Path, name: str) -> Iterator[Path]:
    """A fresh directory `parent/name` for one build, removed on the way out (also on failure and Ctrl-C)."""
    directory = parent / name
    remove_scratch(directory)
    directory.mkdir(parents=True)
    try:
        yield directory
    finally:
        remove_scratch(directory)


def require_root_and_apt() -> None:
    """One line naming what to do where the build cannot run: mmdebstrap's root mode needs root and apt."""
    if os.geteuid() != 0:
        raise UsageError("image build writes a Debian root filesystem with mmdebstrap as root: run it as root")
    if shutil.which("apt-get") is None:
        raise UsageError("image build needs a Debian or Ubuntu host with apt-get (mmdebstrap uses apt)")

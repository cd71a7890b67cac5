"""What installing a vendor's manifests on the real node will change, written down before they are applied.

The manifests' pods mount host paths (hostPath volumes): the kubelet creates a missing one (`DirectoryOrCreate`,
`FileOrCreate`, as `mkdir -p` would) and the driver writes into it. Before the install applies them, `take` notes
for each host path of every pod template whether it existed, and, where it did not, the top-most of its missing
ancestors: what the install may create. `restore` (the real node's teardown, run again by `cluster down` after a
killed run) removes those, and nothing else. A host path that existed keeps what it holds, new or not: only the
standard directories `real_node.HostRecord` guards entry by entry (the kubelet root, the CDI spec directories) lose
what was added to them.

The record also names the DaemonSets the install applies (`namespace/name`): the backend reports them as
`ClusterInfo.driver_daemonsets`, so the suites take the driver's pods as theirs rather than guess from mounts.

The record lives in the cluster's state directory, so a `cluster down` from another process finds it. Every host
path is read below `root` (`/`; a directory of their own in the unit tests).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dra_conformance.backends.local.layout import REAL_NODE, ClusterLayout

# Never recorded and never deleted, whatever a manifest mounts: the host's top directories (and the symbolic link
# /var/run), each holding the system or its users' data. They always exist, so a record would only ever say "keep";
# refusing them outright guards against a record that says otherwise (a bug, a corrupted or edited file).
PROTECTED_PATHS = frozenset(
    {
        "/",
        "/etc",
        "/var",
        "/usr",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/home",
        "/root",
        "/tmp",
        "/boot",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/var/lib",
        "/var/run",
        "/var/log",
        "/var/tmp",
        "/usr/lib",
        "/usr/local",
    }
)
# File systems the kernel populates itself: what appears there during a run (a device node, a cgroup, a process) is
# not the install's doing and not ours to delete, so nothing at or below them is recorded.
KERNEL_TREES = (PurePosixPath("/proc"), PurePosixPath("/sys"), PurePosixPath("/dev"))
# The host's own root: `take` and `restore` read and delete below it.
HOST_ROOT = Path("/")


@dataclass(frozen=True)
class InstallRecord:
    """The install's DaemonSets and host paths, as they were before it applied anything."""

    # `namespace/name` of each DaemonSet the manifests hold, in file order.
    daemonsets: list[str] = field(default_factory=list)
    # Every host path the pod templates mount (normalized) and whether it existed.
    existed: dict[str, bool] = field(default_factory=dict)
    # What the install may create: for each host path that did not exist, its top-most missing ancestor (or itself).
    # `restore` removes these, and only these.
    created: list[str] = field(default_factory=list)
    # Host paths neither recorded nor restored, and why (PROTECTED_PATHS, KERNEL_TREES, the state directory).
    refused: dict[str, str] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        """Save as JSON (before the install applies anything, so a killed run can still be undone)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.replace(path)

    @classmethod
    def read(cls, path: Path) -> InstallRecord | None:
        """The saved record, or None when nothing was installed."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def record_path(layout: ClusterLayout) -> Path:
    """Where the install record of the cluster in `layout` lives (beside the real node's host record)."""
    return layout.root / "nodes" / REAL_NODE / "install.json"


# --- what the manifests hold --------------------------------------------------------------------------------------


def pod_specs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of one object: a Pod's own, a CronJob's job template's, any other kind's `spec.template`."""
    spec = document.get("spec")
    if document.get("kind") == "PodTemplate":
        spec = {"template": document.get("template")}
    if not isinstance(spec, dict):
        return []
    if document.get("kind") == "Pod":
        return [spec]
    if document.get("kind") == "CronJob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, dict) else None
        if not isinstance(spec, dict):
            return []
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    return [pod] if isinstance(pod, dict) else []


def host_paths_of(documents: Iterable[dict[str, Any]]) -> list[str]:
    """Every hostPath volume's path in the documents' pod templates, as written, first occurrence first."""
    found: dict[str, None] = {}
    for document in documents:
        for pod in pod_specs(document):
            for volume in pod.get("volumes") or []:
                host_path = volume.get("hostPath") if isinstance(volume, dict) else None
                if isinstance(host_path, dict) and isinstance(host_path.get("path"), str):
                    found[host_path["path"]] = None
    return list(found)


def daemonsets_of(documents: Iterable[dict[str, Any]]) -> list[str]:
    """`namespace/name` of each DaemonSet among the documents (no namespace: `default`, where apply puts it), once."""
    names = [
        f"{d['metadata'].get('namespace') or 'default'}/{d['metadata']['name']}"
        for d in documents
        if d.get("kind") == "DaemonSet"
    ]
    return list(dict.fromkeys(names))


# --- refusals -----------------------------------------------------------------------------------------------------


def _on_host(path: PurePosixPath, root: Path) -> Path:
    return root.joinpath(*path.parts[1:])


def _within(path: PurePosixPath | Path, top: PurePosixPath | Path) -> bool:
    return path == top or top in path.parents


def normalized(path: str) -> PurePosixPath | None:
    """`path` without repeated or trailing slashes; None unless absolute and free of `..` (the API refuses those)."""
    pure = PurePosixPath(path)
    return pure if pure.is_absolute() and ".." not in pure.parts else None


def refusal(path: PurePosixPath, root: Path, state_dir: Path) -> str | None:
    """Why `path` may be neither recorded nor deleted, else None.

    Checked as written and as resolved (symbolic links followed, as the kubelet's mkdir and our deletion would).
    """
    host = _on_host(path, root)
    real_root = root.resolve()
    real = host.resolve()
    if not _within(real, real_root):
        return f"it resolves to {real}, outside {root}"
    for logical in (path, PurePosixPath("/", *real.relative_to(real_root).parts)):
        if str(logical) in PROTECTED_PATHS:
            return f"{logical} is one of the host's top directories (PROTECTED_PATHS)"
        for tree in KERNEL_TREES:
            if _within(logical, tree):
                return f"{logical} is in {tree}, which the kernel populates (KERNEL_TREES)"
    state = state_dir.resolve()
    if _within(state, real) or _within(state, host):
        return f"it holds the cluster's state directory {state_dir}"
    return None


def _top_missing(path: PurePosixPath, root: Path) -> PurePosixPath | None:
    """The top-most of `path` and its ancestors that does not exist (what `mkdir -p path` makes); None if it exists."""
    if os.path.lexists(_on_host(path, root)):
        return None
    top = path
    for parent in path.parents:
        if os.path.lexists(_on_host(parent, root)):
            break
        top = parent
    return top


# --- before and after ---------------------------------------------------------------------------------------------


def snapshot(documents: list[dict[str, Any]], state_dir: Path, root: Path = HOST_ROOT) -> InstallRecord:
    """What the documents' host paths look like below `root` now, and their DaemonSets."""
    existed: dict[str, bool] = {}
    created: dict[str, None] = {}
    refused: dict[str, str] = {}
    for written in host_paths_of(documents):
        path = normalized(written)
        if path is None:
            refused[written] = "not an absolute path free of '..'"
            continue
        why = refusal(path, root, state_dir)
        if why is not None:
            refused[str(path)] = why
            continue
        top = _top_missing(path, root)
        existed[str(path)] = top is None
        if top is None:
            continue
        why = refusal(top, root, state_dir)
        if why is not None:
            refused[str(path)] = f"what mounting it creates, {top}, may not be deleted: {why}"
        else:
            created[str(top)] = None
    return InstallRecord(daemonsets_of(documents), existed, sorted(created), refused)


def describe(record: InstallRecord) -> list[str]:
    """One line on the host paths the install mounts (and what the teardown removes), one per refused path."""
    lines = []
    if record.existed:
        shown = ", ".join(f"{path} ({'present' if there else 'absent'})" for path, there in record.existed.items())
        removed = f"; removed with the cluster: {', '.join(record.created)}" if record.created else ""
        lines.append(f"install: host paths the manifests mount: {shown}{removed}")
    lines += [f"install: host path {path} left as the run leaves it: {why}" for path, why in record.refused.items()]
    return lines


def take(
    layout: ClusterLayout, documents: list[dict[str, Any]], echo: Callable[[str], None], root: Path = HOST_ROOT
) -> InstallRecord:
    """Record the documents' host paths and DaemonSets in the cluster's state dir; call before they are applied."""
    record = snapshot(documents, layout.root, root)
    record.write(record_path(layout))
    for line in describe(record):
        echo(line)
    return record


def _mounts_at_or_under(path: Path) -> list[str]:
    """Mount points at or below `path` (from /proc/self/mountinfo; none where it cannot be read)."""
    prefix = str(path.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[4].replace("\\040", " ") for line in lines if len(line.split()) > 4]
    return [p for p in points if p == prefix or p.startswith(prefix.rstrip("/") + "/")]


def restore(record: InstallRecord, state_dir: Path, root: Path = HOST_ROOT) -> list[str]:
    """Remove what the install created below `root` (`record.created`, each checked again); return what was not.

    A path still mounted on, or refused now (a record that is not `take`'s), is left and reported.
    """
    problems = []
    for written in record.created:
        path = normalized(written)
        why = "not an absolute path free of '..'" if path is None else refusal(path, root, state_dir)
        if path is None or why is not None:
            problems.append(f"path {written} (recorded as created by the install) not removed: {why}")
            continue
        host = _on_host(path, root)
        if not os.path.lexists(host):
            continue
        if host.is_dir() and not host.is_symlink():
            mounts = _mounts_at_or_under(host)
            if mounts:
                problems.append(f"path {host}: not removed, mounts remain at {', '.join(mounts[:3])}")
                continue
            # --preserve-root=all: never a directory on another device than its parent; --one-file-system: nor
            # anything below on another file system.
            done = subprocess.run(
                ["rm", "-rf", "--one-file-system", "--preserve-root=all", "--", str(host)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                problems.append(f"path {host}: {' '.join(done.stderr.split())}")
        else:
            try:
                host.unlink(missing_ok=True)
            except OSError as error:  # a file mounted on, say
                problems.append(f"path {host}: {error.strerror or error}")
    return problems


def leftovers(record: InstallRecord, root: Path = HOST_ROOT) -> list[str]:
    """What the install created that is still there."""
    return [
        f"path {path} (absent before the install)"
        for path in record.created
        if (pure := normalized(path)) is not None and os.path.lexists(_on_host(pure, root))
    ]


def removable(record: InstallRecord, state_dir: Path, root: Path = HOST_ROOT) -> list[Path]:
    """The paths of `record.created` that `restore` may remove (below `root`): where to unmount before it does."""
    paths = [normalized(written) for written in record.created]
    return [_on_host(p, root) for p in paths if p is not None and refusal(p, root, state_dir) is None]


def driver_daemonsets(layout: ClusterLayout) -> tuple[str, ...]:
    """`namespace/name` of the DaemonSets the backend installed for the driver (none without an install)."""
    record = InstallRecord.read(record_path(layout))
    return tuple(record.daemonsets) if record is not None else ()

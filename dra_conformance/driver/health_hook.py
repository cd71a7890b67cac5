"""A profile's `health` hooks: make one device of the driver unhealthy on purpose, and healthy again.

A hook runs on this machine for one device on one node (`hook_values`): a command, which must exit 0 within
HOOK_TIMEOUT, or a file written or removed. `run` answers the problem in one line (None when the hook did what it
declares), so that the check can tell a hook that does not run from a driver that does not report what it did.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from dra_conformance.driver.profile import BINARY_PLACEHOLDER, DriverProfile, Hook, render_hook
from dra_conformance.driver.reference import GO_BUILD_DETAIL
from dra_conformance.model.driver import DriverEndpoint

# How long a hook command may run: it returns once the driver noticed, which takes a republish at most.
HOOK_TIMEOUT = 60.0
# How much of a failed command's output a problem quotes.
OUTPUT_QUOTED = 400


def hook_values(
    profile: DriverProfile, endpoint: DriverEndpoint, device: str, pool: str, details: Mapping[str, str]
) -> dict[str, str]:
    """What a hook's placeholders stand for, for `device` of `pool` on the endpoint's node, seen from this machine.

    `details`: the cluster's (ClusterInfo.details), which name the reference driver's program where a local cluster
    built it; elsewhere `{bin:reference_driver_go}` has no value and rendering the hook says so.
    """
    values = {
        "driver": profile.driver,
        "node": endpoint.node,
        "device": device,
        "pool": pool,
        "plugins_dir": str(endpoint.plugins_dir),
        "kubelet_root": str(endpoint.kubelet_root),
        "python": sys.executable,
    }
    if details.get(GO_BUILD_DETAIL):
        values[f"{BINARY_PLACEHOLDER}:reference_driver_go"] = details[GO_BUILD_DETAIL]
    return values


def _quoted(output: str) -> str:
    text = " ".join(output.split())
    return text if len(text) <= OUTPUT_QUOTED else text[:OUTPUT_QUOTED] + "..."


def render_all(hook: Hook, values: Mapping[str, str]) -> list[str]:
    """Every template of `hook` filled in, without running it: UsageError where a placeholder has no value here."""
    templates = [*hook.command, *(hook.write_file or ()), *([hook.remove_file] if hook.remove_file else [])]
    return [render_hook(template, values) for template in templates]


def run(hook: Hook, values: Mapping[str, str], timeout: float = HOOK_TIMEOUT) -> str | None:
    """Do what `hook` declares; None when it did, else why not in one line.

    A placeholder without a value raises UsageError (the environment cannot run the hook, rendered before any
    action).
    """
    if hook.command:
        argv = [render_hook(word, values) for word in hook.command]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"{argv} did not exit within {timeout:g}s"
        except OSError as error:
            return f"{argv}: {error.strerror or error}"
        if done.returncode != 0:
            return f"{argv} exited {done.returncode}: {_quoted(done.stderr or done.stdout)}"
        return None
    if hook.write_file is not None:
        path, content = (render_hook(text, values) for text in hook.write_file)
        try:
            Path(path).write_text(content, encoding="utf-8")
        except OSError as error:
            return f"write {path}: {error.strerror or error}"
        return None
    path = render_hook(hook.remove_file or "", values)
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as error:
        return f"remove {path}: {error.strerror or error}"
    return None

"""The per-user cache that the engine's build cache and the generated kubelet API bindings share."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/dra-conformance` (default `~/.cache/dra-conformance`), shared by every checkout on the machine.

    CI clones on the same machine reuse warm builds through it.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dra-conformance"

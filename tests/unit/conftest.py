"""Unit tests run with no cluster; those marked `needs_go` also need the Go toolchain or its module cache."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register `needs_go`: `tox -e unit` (the fast loop) leaves these out, `tox -e tests` runs them."""
    config.addinivalue_line(
        "markers",
        "needs_go: needs the Go toolchain or the Go module cache (builds, generated kubelet API bindings, citations)",
    )

"""Masking the run's artifacts once every other writer is done (see `dra_conformance.report.masking`)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance.plugin import stash
from dra_conformance.report.masking import mask_run


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--dra-no-mask`."""
    group = parser.getgroup("dra-conformance", "DRA conformance")
    group.addoption(
        "--dra-no-mask",
        action="store_true",
        help="keep IPs, MACs, interface names and device serials in the reports as they are (masked by default)",
    )


def _masks(config: pytest.Config) -> bool:
    """In the controller of an opted-in run that wrote reports, unless --dra-no-mask."""
    if stash.is_worker(config) or stash.RUN_DIR not in config.stash or config.getoption("--dra-no-mask"):
        return False
    return config.stash[stash.RUN_DIR].is_dir()


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say that the reports get masked (it happens after JUnit is written, when nothing prints any more)."""
    if _masks(config):
        terminalreporter.line(
            "reports: IPs, MACs, interface names and device serials masked (--dra-no-mask keeps them)"
        )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller, after JUnit (written at session finish) and every summary: mask the run's directory.

    Silent: the run's last line stays pytest's own outcome line, which CI tools parse.
    """
    if _masks(config):
        mask_run(config.stash[stash.RUN_DIR])

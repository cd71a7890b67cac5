"""Masking the run's artifacts once every other writer is done (see `dra_conformance.report.masking`)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance.plugin import stash
from dra_conformance.report.masking import mask_run


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--no-mask`."""
    group = parser.getgroup("dra-conformance", "DRA conformance")
    group.addoption(
        "--no-mask",
        action="store_true",
        help="keep IPs, MACs, interface names and device serials in the reports as they are (masked by default)",
    )


def _masks(config: pytest.Config) -> bool:
    return not stash.is_worker(config) and stash.RUN_DIR in config.stash and not config.getoption("--no-mask")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say that the reports get masked (it happens after JUnit is written, when nothing prints any more)."""
    if _masks(config):
        terminalreporter.line("reports: IPs, MACs, interface names and device serials masked (--no-mask keeps them)")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller, after JUnit (written at session finish) and every summary: mask the run's directory.

    Silent: the run's last line stays pytest's own outcome line, which CI tools parse.
    """
    run_dir = config.stash[stash.RUN_DIR] if stash.RUN_DIR in config.stash else None
    if _masks(config) and run_dir is not None and run_dir.is_dir():
        mask_run(run_dir)

"""The second net: masking the run's artifacts once every other writer is done (`dra_conformance.report.masking`).

The first is at the source (`dra_conformance.plugin.masking_hooks`). This module is a plugin of its own so that a
test can leave it out (`-p no:dra_conformance.plugin.artifact_masking`) and show that the source alone suffices.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance.plugin import stash
from dra_conformance.report.masking import mask_run


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

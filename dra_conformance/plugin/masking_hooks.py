"""Masking the run's artifacts once every other writer is done (see `dra_conformance.report.masking`)."""

from __future__ import annotations

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


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller, after JUnit (written at session finish) and every summary: mask the run's directory."""
    if stash.is_worker(config) or stash.RUN_DIR not in config.stash or config.getoption("--no-mask"):
        return
    run_dir = config.stash[stash.RUN_DIR]
    if run_dir.is_dir():
        counts = mask_run(run_dir)
        config.get_terminal_writer().line(
            f"dra-conformance: masked {counts['values']} infrastructure values in {counts['files']} report files "
            "(--no-mask keeps them)"
        )

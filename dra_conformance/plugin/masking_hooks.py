"""Masking sensitive infrastructure metadata: the `--dra-no-mask` option and the source masking's fixture.

Observed state is masked at the source, before it becomes a message, an attachment, a record or a terminal line
(`dra_conformance.model.masking`); `dra_conformance.plugin.artifact_masking` rewrites the run's files at the end as
a second net. `--dra-no-mask` turns both off.
"""

from __future__ import annotations

import pytest

from dra_conformance.model.masking import ObservedMask


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--dra-no-mask`."""
    group = parser.getgroup("dra-conformance-reports")
    group.addoption(
        "--dra-no-mask",
        action="store_true",
        help="keep IPs, MACs, interface names and device serials in the reports as they are (masked by default)",
    )


@pytest.fixture(scope="session")
def observed_mask(conformance_run: None, pytestconfig: pytest.Config) -> ObservedMask:
    """What every check's observed state passes through before it becomes text (identity with --dra-no-mask)."""
    return ObservedMask(enabled=not pytestconfig.getoption("--dra-no-mask"))

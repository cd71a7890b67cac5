"""How the plugin ends a run that cannot start: one line, and exit code 2, before collection or any worker.

Bad input (a profile, catalog or matrix that does not validate) and a cluster that fails its preflight end the
same way; the code is pytest's own for an interrupted run, and the CLI's for usage errors.
"""

from __future__ import annotations

from typing import NoReturn

import pytest

from dra_conformance.errors import ConformanceError

EXIT_CANNOT_RUN = 2


def refuse(error: ConformanceError) -> NoReturn:
    """Stop the run with `error` as its one line."""
    pytest.exit(f"dra-conformance: {error}", returncode=EXIT_CANNOT_RUN)

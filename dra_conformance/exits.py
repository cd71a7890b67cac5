"""How a run that cannot go on ends: one line, and exit code 2.

The plugin refuses so before collection or any worker: bad input (a profile, catalog or matrix that does not
validate) and a cluster that fails its preflight end the same way. A rollback rehearsal's set-up
(`rollback.steps`) refuses so mid-run when the state file it is named holds a rehearsal not rolled back yet. The
code is pytest's own for an interrupted run, and the CLI's for usage errors.
"""

from __future__ import annotations

from typing import NoReturn

import pytest

from dra_conformance.errors import ConformanceError

EXIT_CANNOT_RUN = 2


def refuse(error: ConformanceError) -> NoReturn:
    """Stop the run with `error` as its one line."""
    pytest.exit(f"dra-conformance: {error}", returncode=EXIT_CANNOT_RUN)

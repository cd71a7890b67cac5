"""The reference driver (drivers/fake-dra-go): its own Go tests, and gofmt and go vet, pass.

The Go tests cover its pure logic against values its former Python build gave (identifiers, the state file in both
release formats, the pool's split into slices, the fault vocabulary); what it does on a cluster is judged by the
suites, which run it as the default profile's driver.
"""

from __future__ import annotations

import subprocess

import pytest

from dra_conformance import paths

# `go test` compiles client-go and gRPC on a cold cache (about a minute on 2 cores), then takes seconds.
GO_TEST_DEADLINE = 600.0


def _go(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=paths.reference_driver_go_module(),
        capture_output=True,
        text=True,
        timeout=GO_TEST_DEADLINE,
        check=False,
    )


@pytest.mark.needs_go
def test_the_go_build_is_gofmt_clean_and_passes_go_vet() -> None:
    unformatted = _go("gofmt", "-l", ".")
    assert unformatted.returncode == 0 and not unformatted.stdout.strip(), (
        f"gofmt -l lists files to format: {unformatted.stdout.split()} {unformatted.stderr.strip()}"
    )
    vet = _go("go", "vet", ".")
    assert vet.returncode == 0, f"go vet: {vet.stderr.strip()[-2000:]}"


@pytest.mark.needs_go
@pytest.mark.timeout(GO_TEST_DEADLINE)
def test_the_go_builds_own_tests_pass() -> None:
    tested = _go("go", "test", "-count=1", ".")
    assert tested.returncode == 0, f"go test: {(tested.stdout + tested.stderr).strip()[-3000:]}"

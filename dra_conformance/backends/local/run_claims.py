"""One run per local cluster: a run claims the state directory for its whole length; a second is refused or waits.

Two runs on one cluster pull it from under each other (rollback rehearsals restart drivers, the canary counts the
other's writes) and each then blames the driver. So a run claims the state directory before it starts or attaches
to the cluster, and gives the claim back when it ends. A run that finds another's claim is refused in one line
naming it (run id, pid, since when), or, asked to (`--dra-wait`), waits until the claim is given back. Runs that
both ask for a shared cluster (`--dra-share-cluster`) may hold it together: they promise each other not to restart
or change what the other uses.

The claims live in `runs.json` in the state directory, read and written under their own short lock. A claim names
the run's owner process (pid and start time, as `owners.Owner`): the claim of a process that is gone, killed or
crashed, counts for nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from dra_conformance.backends.local.owners import Owner
from dra_conformance.errors import UsageError, WaitTimeout
from dra_conformance.kube import waits

CLAIMS_FILE = "runs.json"
CLAIMS_LOCK = "runs.lock"
# How long `--dra-wait` waits for the other run: a default run takes minutes, a real node's or a repeated one up to
# an hour; past two hours the other run is more likely stuck than busy.
WAIT_DEADLINE = 2 * 3600.0
# How often a waiting run looks again: a run lasts minutes, so seconds of delay are nothing.
WAIT_POLL_CAP = 5.0


@dataclass(frozen=True)
class Claim:
    """One run holding the state directory."""

    run_id: str
    pid: int
    # The owner process's start time (clock ticks since boot): a reused pid is not mistaken for it.
    started: int
    # When the claim was made (seconds since the epoch).
    since: float
    shared: bool = False

    def alive(self) -> bool:
        """Whether the run's owner process still runs."""
        return Owner(self.pid, self.started).alive()

    def describe(self) -> str:
        """`run 20261205-150102-ab12 (pid 4242, since 2026-12-05 15:01:02 UTC)`."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"run {self.run_id} (pid {self.pid}, since {when}{', shared' if self.shared else ''})"


def _not_yours(state_dir: Path, error: PermissionError) -> str:
    where = Path(error.filename) if error.filename else state_dir
    owner = ""
    for candidate in (where, *where.parents):
        with contextlib.suppress(OSError):
            owner = f" (owned by uid {candidate.stat().st_uid})"
            break
    return (
        f"the local cluster's state directory {state_dir} is not this user's (uid {os.geteuid()}): cannot open "
        f"{where}{owner}; run as its owner or use another state directory (--state-dir; pytest: --dra-state-dir)"
    )


def _read(path: Path) -> list[Claim]:
    try:
        raw = json.loads(path.read_text())
        return [Claim(**entry) for entry in raw]
    except (OSError, ValueError, TypeError):
        return []  # none yet, or unreadable: a broken record must not lock every run out


def _write(path: Path, claims: list[Claim]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps([asdict(claim) for claim in claims], indent=2))
    partial.replace(path)


class RunClaims:
    """The claims on one local cluster's state directory."""

    def __init__(self, state_dir: Path) -> None:
        """Claims on the cluster of `state_dir` (created if missing)."""
        self.state_dir = state_dir
        self._path = state_dir / CLAIMS_FILE
        self._lock = FileLock(str(state_dir / CLAIMS_LOCK))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the claims' lock; a state directory of another user is one line naming it, not a traceback."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with self._lock:
                yield
        except PermissionError as error:
            raise UsageError(_not_yours(self.state_dir, error)) from None

    def holders(self) -> list[Claim]:
        """The live claims."""
        with self._locked():
            return [claim for claim in _read(self._path) if claim.alive()]

    def try_claim(self, run_id: str, pid: int, *, shared: bool = False) -> Claim | None:
        """Claim the cluster for run `run_id` (owner `pid`); None once claimed, else the claim that is in the way."""
        owner = Owner.of(pid)
        if owner is None:
            raise ValueError(f"process {pid} is not running")
        with self._locked():
            live = [claim for claim in _read(self._path) if claim.alive()]
            others = [claim for claim in live if claim.run_id != run_id]
            blocking = next((claim for claim in others if not (shared and claim.shared)), None)
            if blocking is not None:
                return blocking
            if not any(claim.run_id == run_id for claim in live):
                live.append(Claim(run_id, pid, owner.started, time.time(), shared))
            _write(self._path, live)
            return None

    def claim(
        self, run_id: str, pid: int, *, shared: bool = False, wait: bool = False, echo: Callable[[str], None]
    ) -> None:
        """Claim the cluster, or raise a one-line UsageError naming the run that holds it; `wait`: wait for it."""
        blocking = self.try_claim(run_id, pid, shared=shared)
        if blocking is None:
            return
        where = f"the local cluster in {self.state_dir}"
        if not wait:
            raise UsageError(
                f"{where} is in use by {blocking.describe()}; wait for it (--dra-wait), share it if both runs agree "
                "(--dra-share-cluster), or use another state directory (--state-dir; pytest: --dra-state-dir)"
            )
        echo(f"dra-conformance: waiting for {blocking.describe()} to finish with {where}")
        try:
            waits.until(
                lambda: self.try_claim(run_id, pid, shared=shared),
                lambda holder: holder is None,
                timeout=WAIT_DEADLINE,
                what=f"{where} to be free",
                describe=lambda holder: f"held by {holder.describe()}" if holder else "free",
                max_interval=WAIT_POLL_CAP,
            )
        except WaitTimeout as timeout:
            raise UsageError(str(timeout)) from None

    def release(self, run_id: str) -> None:
        """Give back run `run_id`'s claim (a no-op if it holds none)."""
        if not self._path.exists():
            return
        with self._locked():
            claims = _read(self._path)
            kept = [claim for claim in claims if claim.run_id != run_id and claim.alive()]
            if kept != claims:
                _write(self._path, kept)

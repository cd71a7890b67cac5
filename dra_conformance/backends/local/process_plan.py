"""What the supervisor runs: one spec per process, and the plan of a cluster's control plane."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ProcessSpec:
    """One process the supervisor runs.

    `wait_for` names an HTTPS URL that must answer 200 before it starts, and `awaited` the supervisor's timeline
    entry for when it first did. When a `critical` process exits the whole cluster stops; a non-critical one (a DRA
    driver, which tests may crash on purpose) is only recorded.
    """

    name: str
    argv: list[str]
    log: str
    wait_for: str | None = None
    awaited: str = "apiserver_ready"
    critical: bool = True
    # Variables added to the supervisor's environment for this process (a driver profile's `run.env`).
    env: dict[str, str] = field(default_factory=dict)
    # Names one request to start this process (see `SupervisedCluster.add_processes`): the supervisor starts an
    # exited process again only for a request it has not served, so one run's restart never revives another's kill.
    request: str = ""


@dataclass(frozen=True)
class Plan:
    """Everything the supervisor needs: processes in start order, and how to probe the API server."""

    processes: list[ProcessSpec]
    server: str
    ca_file: str
    client_cert_file: str
    client_key_file: str
    ready_timeout: float
    stop_timeout: float
    owner_pid: int | None = None
    # Directories outside the state directory the supervisor removes after its children stopped.
    cleanup_paths: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        """Serialize the plan as JSON."""
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> Plan:
        """Load a plan written by `write`."""
        raw = json.loads(path.read_text())
        raw["processes"] = [ProcessSpec(**spec) for spec in raw["processes"]]
        return cls(**raw)

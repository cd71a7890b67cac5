"""The small, flat set of errors the engine raises; each carries lowercase context ("start etcd: ...")."""

from __future__ import annotations

from typing import Any


class ConformanceError(Exception):
    """Base of every error the engine raises on purpose; its message is one line meant for the user."""


class UsageError(ConformanceError):
    """Bad input from the user: a flag, profile, fixture, kubeconfig or fault configuration."""


class BackendError(ConformanceError):
    """A cluster backend could not build, start, reach or stop its cluster."""


class BuildError(BackendError):
    """Building a pinned upstream component failed."""

    def __init__(self, component: str, log_path: str, log_tail: str) -> None:
        """Name the component and keep the tail of its build log for the user."""
        super().__init__(f"build {component} failed; see {log_path}")
        self.component = component
        self.log_path = log_path
        self.log_tail = log_tail


class HarnessFault(ConformanceError):
    """The suite's own limit stopped a check: never a finding about the driver or the cluster.

    The check errors, attributed to the harness obligation `obligation` of the registry.
    """

    obligation = ""


class SuiteForbidden(HarnessFault):
    """The API server refused a request of the identity the suite runs as: a right it needs is not granted."""

    obligation = "run.suite-identity-holds-its-rights"


class RelayUnavailable(HarnessFault):
    """The node agent's relay did not carry a connection to a driver's socket (port-forward, relay, or its dial)."""

    obligation = "run.node-agent-relay-carries-the-driver-sockets"


class ReportsFull(HarnessFault):
    """The reports' file system has no room for what a check records: the suite's problem, not the driver's."""

    obligation = "run.reports-dir-has-room"


class DriverError(ConformanceError):
    """A DRA driver under test misbehaved in a way that stops the check itself."""


class DriverStartError(UsageError):
    """The driver under test did not start as its profile says: command missing, exited, or no complete pool."""


class FixtureError(UsageError):
    """A scenario fixture or matrix file is invalid (the message names the file and the key path)."""


class ProfileError(UsageError):
    """A driver profile is invalid; one line: `<file>:<line>: <key path>: <problem>`."""

    def __init__(self, file: str, line: int, key_path: str, problem: str) -> None:
        """Locate the problem: the profile file, the line of the offending key or value, and its key path."""
        super().__init__(f"{file}:{line}: {key_path}: {problem}")
        self.file = file
        self.line = line
        self.key_path = key_path
        self.problem = problem

    def __reduce__(self) -> tuple[type[ProfileError], tuple[str, int, str, str]]:
        """Pickle with the constructor's arguments (the default passes only the message)."""
        return ProfileError, (self.file, self.line, self.key_path, self.problem)


class WaitTimeout(ConformanceError):
    """A condition was not met before its named deadline; carries what was awaited and the last state seen."""

    def __init__(self, what: str, timeout: float, last_observed: Any = None, last_error: BaseException | None = None):
        """Describe the wait, its deadline, and the last observation or error."""
        message = f"timed out after {timeout:g}s waiting for {what}"
        if last_observed is not None:
            message += f"; last observed: {last_observed}"
        if last_error is not None:
            message += f"; last error: {type(last_error).__name__}: {last_error}"
        super().__init__(message)
        self.what = what
        self.timeout = timeout
        self.last_observed = last_observed
        self.last_error = last_error

"""Whether a check may read samples of some versions, decided from the up-front availability read."""

from __future__ import annotations

from collections.abc import Sequence

from kubernetes import client

from dra_conformance.errors import WaitTimeout
from dra_conformance.metrics.availability import MISSING, Availability, VersionAvailability
from dra_conformance.metrics.reads import GROUP
from dra_conformance.metrics.samples import SampleScope, wait_first_node_samples

# The check (suites/metrics) that judges each version's availability; the checks it blocks name it.
AVAILABILITY_CHECK = "test_served_version_has_an_available_apiservice_and_serves_node_metrics"


class SampleGate:
    """Whether a check can read samples of some versions, decided from the up-front availability read.

    A version unavailable at that read blocks at once: the availability check carries the finding and no check
    waits its deadline for samples that cannot come. An Available version is waited for its first node samples
    once per run; a version that served none within the deadline blocks the checks after it at once.
    """

    def __init__(
        self, api: client.ApiClient, availability: Availability, scope: SampleScope, first_sample_timeout: float
    ) -> None:
        """Gate reads of `api` by `availability`; wait at most `first_sample_timeout` for first samples in `scope`."""
        self.api, self.availability, self.scope, self.timeout = api, availability, scope, first_sample_timeout
        # Version -> None once its first node samples came, or the wait's error when they did not.
        self.first: dict[str, str | None] = {}

    def first_samples(self, version: str) -> str | None:
        """None once `version` served node samples (waited for once per run), else why it did not."""
        if version not in self.first:
            try:
                wait_first_node_samples(self.api, version, self.scope, self.timeout)
                self.first[version] = None
            except WaitTimeout as error:
                self.first[version] = str(error)
        return self.first[version]

    def blocked(self, versions: Sequence[str]) -> str | None:
        """Why samples of `versions` cannot be read, naming the check that carries the finding; None if they can."""
        states = [self.availability.versions.get(v) or VersionAvailability(v, False, MISSING) for v in versions]
        unavailable = [s for s in states if not s.available]
        if unavailable:
            checks = ", ".join(f"{AVAILABILITY_CHECK}[{s.version}]" for s in unavailable)
            return (
                "; ".join(s.describe() for s in unavailable) + f" at the run's availability read; the availability "
                f"check {checks} carries the finding"
            )
        for version in versions:
            error = self.first_samples(version)
            if error is not None:
                return (
                    f"{GROUP}/{version} served no NodeMetrics: {error}; the availability check "
                    f"{AVAILABILITY_CHECK}[{version}] carries the finding"
                )
        return None

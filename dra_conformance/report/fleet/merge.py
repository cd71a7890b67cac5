"""The fleet table: each cluster's latest run, stale ones flagged, disagreements on one driver version first."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dra_conformance.report.fleet.durations import describe_duration
from dra_conformance.report.fleet.runs import FleetRun

# A cluster that runs the suite nightly has a run at most 24 h old; 12 h more absorbs a nightly job that starts
# late, is queued behind others or retried, or runs the whole suite on a slow cluster. One missed night (48 h) is
# always flagged.
DEFAULT_STALE_AFTER = timedelta(hours=36)


@dataclass(frozen=True)
class ClusterRow:
    """One cluster: its latest run, how many older runs were read, and whether the result is stale."""

    run: FleetRun
    older_runs: int
    age: timedelta
    stale: bool
    # The cluster's verdict differs from another cluster's on the same driver name and version.
    disagrees: bool

    @property
    def verdict(self) -> str:
        """The verdict as shown: a stale result is never shown as passing, whatever it was."""
        if self.stale:
            return f"stale (was {self.run.verdict}, {describe_duration(self.age)} ago)"
        return self.run.verdict


@dataclass(frozen=True)
class Disagreement:
    """One driver version whose latest verdicts differ across clusters."""

    driver: str
    version: str
    # (cluster, verdict as shown), by cluster.
    verdicts: tuple[tuple[str, str], ...]
    # The profiles the clusters ran it with (several: their declared capabilities may explain the difference).
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fleet:
    """The whole table and what it was built from."""

    # Clusters of a disagreement first (by driver, version, cluster), then the rest by cluster.
    rows: tuple[ClusterRow, ...]
    disagreements: tuple[Disagreement, ...]
    runs_read: int
    now: datetime
    stale_after: timedelta
    # Inputs found inside directories that held no summary (a tarball of something else).
    skipped: tuple[str, ...] = ()


def build_fleet(runs: Sequence[FleetRun], now: datetime, stale_after: timedelta, skipped: Sequence[str] = ()) -> Fleet:
    """The fleet table as of `now`."""
    by_cluster: dict[str, list[FleetRun]] = defaultdict(list)
    for run in runs:
        by_cluster[run.cluster].append(run)
    latest = []
    for cluster_runs in by_cluster.values():
        # The latest run; of two at the same time, the one found last by source name, so the choice is stable.
        newest = max(cluster_runs, key=lambda run: (run.finished_at, run.source))
        age = max(now - newest.finished_at, timedelta(0))
        latest.append(ClusterRow(newest, len(cluster_runs) - 1, age, age > stale_after, disagrees=False))
    disagreements, disagreeing = _disagreements(latest)
    rows = [
        ClusterRow(row.run, row.older_runs, row.age, row.stale, disagrees=row.run.cluster in disagreeing)
        for row in latest
    ]
    order = {key: index for index, key in enumerate((d.driver, d.version) for d in disagreements)}

    def position(row: ClusterRow) -> tuple[int, int, str]:
        key = (row.run.driver, row.run.driver_version or "")
        return (0, order[key], row.run.cluster) if row.disagrees else (1, 0, row.run.cluster)

    return Fleet(tuple(sorted(rows, key=position)), disagreements, len(runs), now, stale_after, tuple(skipped))


def _disagreements(rows: list[ClusterRow]) -> tuple[tuple[Disagreement, ...], set[str]]:
    """Driver versions whose clusters' latest verdicts differ (stale ones included: they are results too).

    A driver that states no version is never compared: two unversioned builds need not be the same driver.
    """
    by_version: dict[tuple[str, str], list[ClusterRow]] = defaultdict(list)
    for row in rows:
        if row.run.driver_version:
            by_version[(row.run.driver, row.run.driver_version)].append(row)
    found = []
    clusters: set[str] = set()
    for (driver, version), group in sorted(by_version.items()):
        if len({row.run.verdict for row in group}) > 1:
            ordered = sorted(group, key=lambda row: row.run.cluster)
            verdicts = tuple((row.run.cluster, row.verdict) for row in ordered)
            found.append(Disagreement(driver, version, verdicts, tuple(sorted({row.run.profile for row in group}))))
            clusters.update(row.run.cluster for row in group)
    return tuple(found), clusters

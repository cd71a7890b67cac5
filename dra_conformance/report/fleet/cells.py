"""The fleet table's texts, shared by its Markdown and HTML forms: the heading lines, the columns and each cell."""

from __future__ import annotations

from datetime import UTC, datetime

from dra_conformance.report.certification import DEVICE_PLUGIN_ROLLBACK, METRICS_API_ROLLBACK
from dra_conformance.report.fleet.durations import describe_duration, spell_duration
from dra_conformance.report.fleet.merge import ClusterRow, Disagreement, Fleet
from dra_conformance.report.fleet.runs import FleetRun, Rehearsal

COLUMNS = (
    "cluster",
    "Kubernetes",
    "driver",
    "verdict",
    "failed obligations",
    "canary gate",
    "metrics verdict",
    METRICS_API_ROLLBACK,
    DEVICE_PLUGIN_ROLLBACK,
    "read exposure",
    "last run",
)
# How many subjects outside the allowlist a cell names before it counts the rest.
SUBJECTS_SHOWN = 3
RUN_DIR_MARK = " (run dir)"


def when(moment: datetime) -> str:
    """'2026-12-01 21:01 UTC'."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def headline(fleet: Fleet) -> str:
    """What the table holds and how it judges staleness."""
    clusters = len(fleet.rows)
    return (
        f"As of {when(fleet.now)}: {clusters} cluster{'s' if clusters != 1 else ''}, the latest run of each "
        f"({fleet.runs_read} run{'s' if fleet.runs_read != 1 else ''} read). A cluster whose last run is older than "
        f"{spell_duration(fleet.stale_after)} is stale, and its verdict is never shown as passing."
    )


DISAGREEMENT_LINE = "Verdicts disagree on the same driver version across clusters; those clusters are listed first:"


def disagreement(found: Disagreement) -> str:
    """'gpu.example.com 2.0.0: certified on a, b; not certified on c (profiles differ: p.yaml, q.yaml)'."""
    clusters: dict[str, list[str]] = {}
    for cluster, verdict in found.verdicts:
        clusters.setdefault(verdict, []).append(cluster)
    verdicts = "; ".join(f"{verdict} on {', '.join(names)}" for verdict, names in clusters.items())
    profiles = f" (profiles differ: {', '.join(found.profiles)})" if len(found.profiles) > 1 else ""
    return f"{found.driver} {found.version}: {verdicts}{profiles}"


def notes(fleet: Fleet) -> list[str]:
    """Lines after the table: clusters named after their run directory, inputs skipped."""
    lines = []
    if any(not row.run.cluster_named for row in fleet.rows):
        lines.append(
            f"Clusters marked{RUN_DIR_MARK} are named after their run directory: their summaries predate run.cluster "
            "(`--dra-cluster-name`, else the kubeconfig context or the local cluster's name)."
        )
    lines += [f"Skipped {skipped}." for skipped in fleet.skipped]
    return lines


def row_cells(row: ClusterRow) -> tuple[str, ...]:
    """The row's cells, in COLUMNS' order."""
    run = row.run
    return (
        run.cluster + ("" if run.cluster_named else RUN_DIR_MARK),
        run.kubernetes or "not read",
        driver(run),
        row.verdict,
        ", ".join(f"{obligation} ({n})" if n > 1 else obligation for obligation, n in run.failed_obligations.items())
        or "none",
        run.canary_gate,
        run.metrics_verdict,
        rehearsal(run.metrics_api_rollback),
        rehearsal(run.device_plugin_rollback),
        read_exposure(run),
        last_run(row),
    )


def driver(run: FleetRun) -> str:
    """'gpu.example.com 2.0.0 (profile p.yaml)'."""
    version = run.driver_version or "(version not stated)"
    return f"{run.driver} {version}" + (f" (profile {run.profile})" if run.profile else "")


def rehearsal(found: Rehearsal) -> str:
    """A rollback rehearsal's cell: '2026-12-01 (rolled back cleanly)', or why there is no date."""
    if found.at is None:
        return found.verdict
    return found.at.astimezone(UTC).strftime("%Y-%m-%d") + (f" ({found.verdict})" if found.verdict else "")


def read_exposure(run: FleetRun) -> str:
    """'not checked', the state, or the state with the subjects outside the allowlist."""
    exposure = run.read_exposure
    if exposure is None:
        return "not checked"
    subjects = exposure.outside_allowlist
    if not subjects:
        return exposure.state
    shown = ", ".join(subjects[:SUBJECTS_SHOWN])
    more = len(subjects) - SUBJECTS_SHOWN
    return f"{exposure.state}: {len(subjects)} outside the allowlist ({shown}{f', +{more} more' if more > 0 else ''})"


def last_run(row: ClusterRow) -> str:
    """'2026-12-01 21:01 UTC (9 h ago; 2 older runs)'."""
    older = f"; {row.older_runs} older run{'s' if row.older_runs > 1 else ''}" if row.older_runs else ""
    return f"{when(row.run.finished_at)} ({describe_duration(row.age)} ago{older})"

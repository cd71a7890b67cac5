"""The fleet table as JSON (fleet.json): every field a machine needs, the raw verdicts next to the shown ones."""

from __future__ import annotations

from typing import Any

from dra_conformance.report.fleet import cells
from dra_conformance.report.fleet.durations import spell_duration
from dra_conformance.report.fleet.merge import ClusterRow, Fleet
from dra_conformance.report.fleet.runs import Rehearsal


def fleet_document(fleet: Fleet) -> dict[str, Any]:
    """The fleet as one JSON-safe document; times are ISO 8601 UTC."""
    return {
        "generated_at": fleet.now.isoformat(timespec="seconds"),
        "stale_after": spell_duration(fleet.stale_after),
        "stale_after_seconds": int(fleet.stale_after.total_seconds()),
        "runs_read": fleet.runs_read,
        "skipped": list(fleet.skipped),
        "disagreements": [
            {
                "driver": found.driver,
                "version": found.version,
                "verdicts": [{"cluster": cluster, "verdict": verdict} for cluster, verdict in found.verdicts],
            }
            for found in fleet.disagreements
        ],
        "clusters": [_cluster(row) for row in fleet.rows],
    }


def _cluster(row: ClusterRow) -> dict[str, Any]:
    run = row.run
    exposure = run.read_exposure
    return {
        "cluster": run.cluster,
        # False: the summary names no cluster; `cluster` is its run directory's name.
        "cluster_named": run.cluster_named,
        "kubernetes": run.kubernetes,
        "driver": run.driver,
        "driver_version": run.driver_version,
        "profile": run.profile,
        "suite_version": run.suite_version,
        "verdict": run.verdict,
        "shown_verdict": row.verdict,
        "stale": row.stale,
        "age_seconds": int(row.age.total_seconds()),
        "disagrees": row.disagrees,
        "failed_obligations": dict(run.failed_obligations),
        "canary_gate": run.canary_gate,
        "metrics_verdict": run.metrics_verdict,
        # The two rollback rehearsals, each apart (fleet.json before held one, "rollback_rehearsal").
        "metrics_api_rollback": _rehearsal(run.metrics_api_rollback),
        "device_plugin_rollback": _rehearsal(run.device_plugin_rollback),
        # None: the run did not check who can read claims.
        "read_exposure": (
            {"state": exposure.state, "outside_allowlist": list(exposure.outside_allowlist)} if exposure else None
        ),
        "read_exposure_text": cells.read_exposure(run),
        "finished_at": run.finished_at.isoformat(),
        "time_source": run.time_source,
        "older_runs": row.older_runs,
        "source": run.source,
    }


def _rehearsal(found: Rehearsal) -> dict[str, Any]:
    return {"at": found.at.isoformat() if found.at else None, "verdict": found.verdict}

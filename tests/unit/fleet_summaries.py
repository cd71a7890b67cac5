"""Summary documents and run directories for the fleet report's unit tests, shaped as the plugin writes them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any


def summary(
    *,
    verdict: str = "certified",
    driver: str = "gpu.example.com",
    version: str | None = "2.0.0",
    cluster: str | None = "prod-a",
    finished_at: str | None = "2026-12-01T22:00:00+00:00",
    failed: tuple[str, ...] = (),
    read_exposure: dict[str, Any] | None = None,
    profile: str = "p.yaml",
) -> dict[str, Any]:
    """A summary.json document; `failed` are the failed checks as suite_table names them."""
    run: dict[str, Any] = {
        "suite_version": "0.1.0",
        "backend": "existing",
        "cluster_version": "v1.37.2",
        "driver": driver,
        "profile": profile,
        "profile_digest": "abc",
        "driver_version": version,
        "declared": [],
    }
    if cluster is not None:
        run["cluster"] = cluster
    if finished_at is not None:
        run["finished_at"] = finished_at
    document: dict[str, Any] = {
        "verdict": verdict,
        "reasons": [],
        "run": run,
        "suites": {"protocol": {"counts": {}, "reasons": [], "failed": list(failed), "errors": []}},
        "canary_gate": {"state": "pass", "rules": []},
        "metrics_verdict": {"state": "not run"},
        "metrics_api_rollback": {"state": "not run"},
        "device_plugin_rollback": {"state": "not run"},
    }
    if read_exposure is not None:
        document["read_exposure"] = read_exposure
    return document


def write_run(root: Path, run_id: str, document: dict[str, Any]) -> Path:
    """`root/<run_id>/summary.json` with an Allure report beside it, as a run writes them; the run's directory."""
    run_dir = root / run_id
    (run_dir / "allure-report").mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(document))
    (run_dir / "allure-report" / "summary.json").write_text(json.dumps({"stats": {"total": 1}}))
    return run_dir


def tar_bytes(members: dict[str, bytes], links: dict[str, str] | None = None, gzip: bool = True) -> bytes:
    """A tarball in memory: regular files by name, and symbolic links (name -> target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzip else "w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_764_626_400  # 2025-12-01T22:00:00Z
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return buffer.getvalue()

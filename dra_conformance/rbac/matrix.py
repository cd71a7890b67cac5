"""The authorization matrix: rows of (identity, action, target, expected outcome, why) run as real identities.

Writes use server-side dry-run, so admission and the status strategies' authorization checks run but nothing is
stored. Outcomes are classified from the API server's answer: 2xx is allow; 403 Forbidden, or 422 with the
granular status-write check's "requires resource=..." text, is deny; anything else is an error (the cell could
not be evaluated) and fails the cell with the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_conformance.errors import ConformanceError, FixtureError
from dra_conformance.kube.client import raw_request
from dra_conformance.model.records import Section

IDENTITIES = ("driver-on-a", "driver-on-b", "driver-arbitrary", "controller", "namespace-user", "tenant", "node-a")
# action -> targets it accepts
ACTIONS: dict[str, tuple[str, ...]] = {
    "status-devices": ("claim-on-a", "claim-on-b", "claim-no-node"),
    "status-devices-other-driver": ("claim-on-a", "claim-on-b", "claim-no-node"),
    "status-reserved-for": ("claim-on-a", "claim-on-b", "claim-no-node"),
    "status-allocation": ("claim-on-a", "claim-on-b", "claim-no-node"),
    "status-devices-update": ("claim-on-a", "claim-on-b", "claim-no-node"),
    "claims-list": ("own", "other"),
    "slice-create": ("own", "other"),
    "slice-update": ("own", "other"),
    "slice-delete": ("own", "other"),
    "metrics-get": ("nodes", "pods"),
}
# Actions on resource.k8s.io run once per served version; the others once.
VERSIONED_ACTIONS = {a for a in ACTIONS if a != "metrics-get"}
REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class Row:
    """One row of the matrix."""

    identity: str
    action: str
    target: str
    expect: str
    why: str

    def cell_id(self, version: str | None) -> str:
        """Readable test id: identity/action/target[/version]."""
        return "/".join(part for part in (self.identity, self.action, self.target, version) if part)


def load_rows(path: Path) -> list[Row]:
    """Validate and load the matrix file; errors name the file and the row."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise FixtureError(f"{path}: {' '.join(str(error).split())}") from None
    if not isinstance(raw, dict) or set(raw) != {"rows"} or not isinstance(raw["rows"], list):
        raise FixtureError(f"{path}: expected exactly one top-level key, rows (a list)")
    rows = []
    for index, item in enumerate(raw["rows"]):
        where = f"{path}: rows[{index}]"
        if not isinstance(item, dict):
            raise FixtureError(f"{where}: expected a mapping")
        unknown = sorted(set(item) - {"identity", "action", "target", "expect", "why"})
        if unknown:
            raise FixtureError(f"{where}.{unknown[0]}: unknown key")
        missing = sorted({"identity", "action", "target", "expect", "why"} - set(item))
        if missing:
            raise FixtureError(f"{where}: missing {', '.join(missing)}")
        if item["identity"] not in IDENTITIES:
            raise FixtureError(
                f"{where}.identity: unknown identity {item['identity']!r}; known: {', '.join(IDENTITIES)}"
            )
        if item["action"] not in ACTIONS:
            raise FixtureError(f"{where}.action: unknown action {item['action']!r}; known: {', '.join(ACTIONS)}")
        if item["target"] not in ACTIONS[item["action"]]:
            raise FixtureError(
                f"{where}.target: {item['target']!r} does not fit {item['action']}; "
                f"use one of {', '.join(ACTIONS[item['action']])}"
            )
        if item["expect"] not in ("allow", "deny"):
            raise FixtureError(f"{where}.expect: must be allow or deny, got {item['expect']!r}")
        rows.append(Row(**item))
    return rows


@dataclass(frozen=True)
class CellResult:
    """What the API server answered for one cell."""

    outcome: str  # allow | deny | error
    status: int
    message: str
    access_review: bool | None = None  # SelfSubjectAccessReview of the base permission, where it applies

    def describe(self) -> str:
        """One line for reports and assertion messages."""
        review = "" if self.access_review is None else f"; SelfSubjectAccessReview allowed={self.access_review}"
        return f"{self.outcome} (HTTP {self.status}): {self.message}{review}"


def classify(status: int, body: str) -> CellResult:
    """Turn an HTTP answer into allow / deny / error with the server's message."""
    try:
        message = str(json.loads(body).get("message", body)) if body else ""
    except ValueError:
        message = body
    if 200 <= status < 300:
        return CellResult("allow", status, "accepted")
    if status == 403 or (status == 422 and "requires resource=" in message):
        return CellResult("deny", status, message)
    return CellResult("error", status, message)


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str | None = None,
    dry_run: bool = False,
    query: list[tuple[str, str]] | None = None,
) -> CellResult:
    """One raw REST call as the identity behind `api` (with server-side dry-run for writes when asked)."""
    headers = {"Content-Type": content_type} if content_type else {}
    query = [*(query or []), *([("dryRun", "All")] if dry_run else [])]
    status, data = raw_request(api, method, path, query=query, headers=headers, body=body, timeout=REQUEST_TIMEOUT)
    return classify(status, data.decode() if data else "")


def access_review(api: client.ApiClient, attributes: dict[str, str]) -> bool:
    """SelfSubjectAccessReview as the identity behind `api`."""
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {"spec": {"resourceAttributes": attributes}}, _request_timeout=REQUEST_TIMEOUT
    )
    return bool(review.status.allowed)


def request_json(api: client.ApiClient, path: str) -> dict[str, Any]:
    """GET `path` and return the decoded object (admin reads that set up update cells)."""
    status, data = raw_request(api, "GET", path, timeout=REQUEST_TIMEOUT)
    if status != 200:
        raise ConformanceError(f"read {path}: HTTP {status}")
    document: dict[str, Any] = json.loads(data)
    return document


RECORD_KIND = "rbac-matrix"


def cell_record(cell_id: str, row: Row, result: CellResult) -> dict[str, Any]:
    """One cell of the matrix as the run report keeps it: the expectation, the answer and the denial text."""
    return {
        "cell": cell_id,
        "expect": row.expect,
        "why": row.why,
        "outcome": result.outcome,
        "status": result.status,
        "message": result.message,
        "accessReview": result.access_review,
    }


def summarize_cells(entries: list[dict[str, Any]]) -> Section | None:
    """Count the matrix's cells and unexpected outcomes; every cell goes to rbac-matrix.json."""
    if not entries:
        return None
    cells = sorted(entries, key=lambda cell: cell["cell"])
    unexpected_allows = [c["cell"] for c in cells if c["outcome"] == "allow" and c["expect"] == "deny"]
    unexpected = [c["cell"] for c in cells if c["outcome"] != c["expect"]]
    return Section(
        title="authorization matrix",
        lines=[
            f"{len(cells)} cells: {sum(c['outcome'] == 'allow' for c in cells)} allowed, "
            f"{sum(c['outcome'] == 'deny' for c in cells)} denied, {len(unexpected)} unexpected "
            f"({len(unexpected_allows)} unexpected allows); every cell: rbac-matrix.json in the run's reports"
        ],
        alerts=[f"  unexpected: {cell}" for cell in unexpected],
        artifact="rbac-matrix.json",
        document=cells,
    )

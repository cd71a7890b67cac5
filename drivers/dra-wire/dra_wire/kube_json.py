"""Requests as plain JSON through the official client's generic request path; reads of core/v1 objects.

The reference driver and the metrics adapter read Nodes and Pods only. The client's CoreV1Api would do, but its
module builds a model class for every core type when first used: 1.27 s of CPU in each process that touches it,
measured against a whole driver start of 2.8 s. Four drivers and the adapter starting at once on two cores paid it
five times per cluster start. `ApiClient.param_serialize` and `call_api` are what CoreV1Api's methods call.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

NOT_FOUND = 404


class JsonClient:
    """Requests through the official client's generic path, with JSON dicts in and out.

    The generated API methods validate every argument with pydantic and set up the same request through several
    layers: under 100 concurrent prepares, py-spy put a third as much GIL time again as the HTTP exchange itself
    into them. An answer of 300 or more raises `ApiException` (with the status and body), as those methods do.
    """

    def __init__(self, api: ApiClient, timeout: float) -> None:
        """Send through `api`; each request gives up after `timeout` seconds."""
        self.api = api
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        content_type: str | None = None,
        query: dict[str, str] | None = None,
        path_params: dict[str, str] | None = None,
    ) -> Any:
        """The decoded answer to `method` on `path` (`{name}`-style placeholders filled from `path_params`)."""
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method,
            path,
            path_params=path_params or None,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request, _request_timeout=self.timeout)
        raw = response.response
        try:
            answer = bytes(raw.data)
        finally:
            raw.release_conn()  # a raw answer keeps its connection out of the pool until released
        if response.status >= 300:
            raise ApiException.from_response(http_resp=response, body=answer.decode(errors="replace"), data=None)
        return json.loads(answer)


class CoreReader:
    """GETs of core/v1 paths, answered as decoded JSON (None for 404); any other error raises `ApiException`."""

    def __init__(self, api: ApiClient, timeout: float) -> None:
        """Read through `api`; each request gives up after `timeout` seconds."""
        self.client = JsonClient(api, timeout)

    def get(self, path: str, *, query: dict[str, str] | None = None, **path_params: str) -> Any:
        """The object or list at `path` (`{name}`-style placeholders filled from `path_params`), or None for 404."""
        try:
            return self.client.request("GET", path, query=query, path_params=path_params)
        except ApiException as error:
            if error.status == NOT_FOUND:
                return None
            raise

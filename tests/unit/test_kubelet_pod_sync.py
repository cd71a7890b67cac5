"""The kubelet's pod sync period, read from its /configz, and the window a status change nothing announced takes."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from kubernetes.client.exceptions import ApiException

from dra_conformance.kubelet import pod_sync


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m0s", 60.0), ("1m30s", 90.0), ("1h0m0s", 3600.0), ("500ms", 0.5), ("1.5s", 1.5)],
)
def test_go_durations_read_as_seconds(text: str, seconds: float) -> None:
    assert pod_sync.go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "ten seconds", "10s junk", "-10s"])
def test_what_is_not_a_go_duration_reads_as_none(text: str) -> None:
    assert pod_sync.go_duration_seconds(text) is None


def _answering(payload: Any) -> mock.MagicMock:
    api = mock.MagicMock()
    api.connect_get_node_proxy_with_path.return_value.data = json.dumps(payload).encode()
    return api


def test_sync_frequency_comes_from_the_kubelets_configz() -> None:
    api = _answering({"kubeletconfig": {"syncFrequency": "10s"}})
    with mock.patch("kubernetes.client.CoreV1Api", return_value=api):
        seconds, source = pod_sync.sync_frequency(mock.MagicMock(), "node-0")
    assert seconds == 10.0
    assert "syncFrequency 10s" in source
    assert api.connect_get_node_proxy_with_path.call_args.args == ("node-0", "configz")


@pytest.mark.parametrize("payload", [{}, {"kubeletconfig": {"syncFrequency": "often"}}, {"kubeletconfig": {}}])
def test_sync_frequency_without_a_readable_setting_is_the_default(payload: Any) -> None:
    with mock.patch("kubernetes.client.CoreV1Api", return_value=_answering(payload)):
        seconds, source = pod_sync.sync_frequency(mock.MagicMock(), "node-0")
    assert seconds == pod_sync.DEFAULT_SYNC_FREQUENCY
    assert source.startswith("the default")


def test_sync_frequency_of_a_kubelet_the_proxy_refuses_is_the_default_and_says_why() -> None:
    api = mock.MagicMock()
    api.connect_get_node_proxy_with_path.side_effect = ApiException(status=403, reason="Forbidden")
    with mock.patch("kubernetes.client.CoreV1Api", return_value=api):
        seconds, source = pod_sync.sync_frequency(mock.MagicMock(), "node-0")
    assert seconds == pod_sync.DEFAULT_SYNC_FREQUENCY
    assert "403" in source


def test_the_window_is_the_next_jittered_sync_and_a_status_post() -> None:
    assert pod_sync.unannounced_status_window(10.0) == 10.0 * 1.5 + pod_sync.STATUS_POSTED

"""A call the server reset as its deadline passed reads as the kubelet reads it: DEADLINE_EXCEEDED."""

from __future__ import annotations

import grpc

from dra_conformance.kubelet.client import ended_by_deadline


class _Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code)
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "Stream removed (RST_STREAM (Received RST_STREAM with error code 8))"


def test_a_cancel_that_arrives_once_the_deadline_passed_is_the_deadline() -> None:
    seen = ended_by_deadline(_Failed(grpc.StatusCode.CANCELLED), elapsed=0.0031, timeout=0.0005)
    assert seen.code() == grpc.StatusCode.DEADLINE_EXCEEDED, seen
    details = str(seen.details())
    assert "deadline passed after 0.003s" in details and "RST_STREAM" in details, details


def test_a_cancel_before_the_deadline_and_other_errors_stay_what_they_are() -> None:
    early = _Failed(grpc.StatusCode.CANCELLED)
    assert ended_by_deadline(early, elapsed=1.0, timeout=45.0) is early
    unavailable = _Failed(grpc.StatusCode.UNAVAILABLE)
    assert ended_by_deadline(unavailable, elapsed=50.0, timeout=45.0) is unavailable

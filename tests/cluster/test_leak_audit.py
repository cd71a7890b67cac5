"""A test that leaves objects behind fails, and says what it left."""

from __future__ import annotations

import pytest

from dra_conformance.model.cluster import ClusterInfo

LEAKY_TEST = """
from kubernetes import client

def test_creates_a_claim_behind_the_trackers_back(api_client, namespace, tracker):
    spec = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "none"}}]}}
    client.ResourceV1Api(api_client).create_namespaced_resource_claim(
        namespace, {"metadata": {"name": "forgotten"}, "spec": spec})
"""


def test_an_object_left_in_the_namespace_fails_the_test_with_the_leftovers(
    pytester: pytest.Pytester, cluster: ClusterInfo
) -> None:
    if cluster.backend != "local":
        pytest.skip("attaches a second pytest run to the local cluster's state directory")
    pytester.makepyfile(test_leaky=LEAKY_TEST)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--dra-timeout-delete=3",
        f"--dra-state-dir={cluster.details['state_dir']}",
        f"--dra-reports-dir={pytester.path / 'reports'}",
    )
    result.assert_outcomes(passed=1, errors=1)
    output = result.stdout.str()
    assert "LeakError" in output and "ResourceClaim" in output and "/forgotten" in output, output[-2000:]

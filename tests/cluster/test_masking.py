"""No device identifier reaches a report file or the terminal, whatever its shape: it is masked at its source.

A second pytest run against this session's local cluster runs the checks that quote status.devices and networkData
(the NIC status scenario and the networkData check) on private reference drivers that identify their devices in
the `words` format (`--device-id-format=words`: `zq7-...` UUIDs, serial numbers, interface names and hardware
addresses that match no pattern of the end-of-run masker, and IPv6 addresses), keep their status entries after
unprepare and number their interfaces wrongly (network-data-mismatch): under the reference profile's `strict`, both
checks fail and advise quoting what they observed, in JUnit, Allure, the records, the summary and the terminal.

The end-of-run rewrite of the files (`dra_conformance.plugin.artifact_masking`) is left out of that run, so the
source alone must keep every value out. The values' tokens must be there: the checks did quote them.
"""

from __future__ import annotations

import hashlib
import re
import time

import pytest

from dra_conformance import paths
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.masking import mask_value

# The private drivers' options: the words format, a status kept after unprepare (an advisory, a failure under the
# reference profile's strict), interfaces numbered from 1 in networkData (the networkData check's failure).
VARIANT_ARGS = (
    "--device-id-format=words",
    "--keep-status-after-unprepare",
    "--broken-mode=network-data-mismatch",
)
# The attached run must use the session cluster's profile (a running local cluster serves one profile); its private
# drivers take the driver under test's behaviour options from the profile, so this plugin adds the variant's
# options to the profile the run loaded, before any check starts a driver.
VARIANT_PLUGIN = f"""
import dataclasses

import pytest

from dra_conformance.plugin import stash


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    profile = config.stash[stash.PROFILE]
    process = dataclasses.replace(profile.run.process, args=(*profile.run.process.args, *{VARIANT_ARGS!r}))
    config.stash[stash.PROFILE] = dataclasses.replace(profile, run=dataclasses.replace(profile.run, process=process))
"""
CHECKS = "nic-network-data or test_declared_network_data_names_what_the_slice_publishes_for_the_device"
SELECTED = (paths.suites_dir() / "status", paths.suites_dir() / "protocol" / "test_network_data.py")
# What the words format writes: every value starts with zq7-, its addresses are in 2001:db8:7a7::/64.
WORDS_PREFIX = "zq7"
RAW_VALUES = re.compile(rf"{WORDS_PREFIX}-[a-z0-9-]+|2001:db8:7a7::[0-9a-f]+")
# The words the reference driver picks its `words` values from (drivers/fake-dra-go/devices.go, wordID).
WORDS = (
    "amber", "bristle", "cobalt", "dune", "ember", "fjord", "gable", "heron",
    "islet", "juniper", "kestrel", "lumen", "moraine", "nimbus", "opal", "quill",
)  # fmt: skip


def word_id(kind: str, node: str, index: int) -> str:
    """The reference driver's `words` value of `kind` for device `index` on `node` (devices.go: wordID)."""
    digest = hashlib.sha256(f"{kind}/{node}".encode()).digest()
    picked = [WORDS[byte % len(WORDS)] for byte in digest[:3]]
    ordinal = WORDS[index % len(WORDS)] + ("" if index < len(WORDS) else str(index // len(WORDS)))
    return "-".join([WORDS_PREFIX, *picked, ordinal])


def _hits(text: str) -> list[str]:
    return sorted(set(RAW_VALUES.findall(text)))


def test_device_identifiers_of_any_shape_are_masked_at_the_source_in_every_file_and_the_terminal(
    pytester: pytest.Pytester, cluster: ClusterInfo, pytestconfig: pytest.Config
) -> None:
    if cluster.backend != "local":
        pytest.skip("attaches a second pytest run to the local cluster's state directory")
    # pytester runs in a directory of its own: a relative state directory is resolved where this run started.
    state_dir = pytestconfig.invocation_params.dir / cluster.details["state_dir"]
    pytester.makepyfile(masking_variant=VARIANT_PLUGIN)
    reports = pytester.path / "reports"
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "masking_variant",
        "-p",
        "no:dra_conformance.plugin.artifact_masking",
        "-rA",
        f"--dra-state-dir={state_dir}",
        f"--dra-reports-dir={reports}",
        "-k",
        CHECKS,
        *(str(path) for path in SELECTED),
    )
    terminal = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=2)  # both checks broke, quoting what they observed
    for obligation in ("status.entries-removed-after-unprepare", "protocol.network-data-agrees-with-slice"):
        assert obligation in terminal, terminal[-3000:]

    files = sorted(p for p in reports.rglob("*") if p.is_file())
    texts = {str(p.relative_to(reports)): p.read_text(errors="replace") for p in files}
    leaked = {name: _hits(text) for name, text in {**texts, "(terminal)": terminal}.items() if _hits(text)}
    assert not leaked, f"raw device identifiers of the words format in the run's output: {leaked}"

    # The checks quoted them, masked: the status check quotes the entry of nic-0 (its data: the serial), the
    # networkData check that of nic-0 naming the interface of nic-1 (the mutant numbers them from 1).
    node = cluster.nodes[0]
    quoted = {word_id("serial", node, 0), word_id("interface", node, 1)}
    everything = "\n".join([*texts.values(), terminal])
    missing = sorted(value for value in quoted if mask_value(value) not in everything)
    assert not missing, f"tokens of {missing} in no output: the checks quoted less than this test assumes"
    assert any("/allure-results/" in name for name in texts) and "junit.xml" in [p.name for p in files], sorted(texts)
    tokens = {name: text.count("masked-") for name, text in {**texts, "(terminal)": terminal}.items()}
    print(
        f"grepped {len(files)} files and the terminal for {RAW_VALUES.pattern}: none; masked tokens per file "
        f"{ {name: count for name, count in tokens.items() if count} }; run took {time.monotonic() - started:.1f} s"
    )

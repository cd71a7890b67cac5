"""The reference driver's launcher: instances forked from it exit, take signals and report codes like new processes.

No cluster: instances are asked for `--help` or a bad option, or point at an API server that accepts connections
and never answers, so they hang in their first API call until the test signals them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance.driver.launcher import DriverLauncher, ForkedChild, launches_driver
from dra_conformance.driver.reference import driver_argv
from dra_conformance.kube import waits
from dra_conformance.model.driver import DriverEndpoint

# A forked instance exits within milliseconds of a signal or of argparse's answer; ten seconds bound a hung one.
EXIT_TIMEOUT = 10.0
# How long a hung instance is watched not exiting (it hangs for the driver's whole API request timeout, 10 s).
STILL_RUNNING_WINDOW = 0.3


@pytest.fixture
def launcher() -> Iterator[DriverLauncher]:
    started = DriverLauncher()
    yield started
    started.close()


@pytest.fixture
def hung_instance(launcher: DriverLauncher, tmp_path: Path) -> Iterator[ForkedChild]:
    """An instance blocked in its first API call: its API server accepts the connection and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{silent.getsockname()[1]}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "current-context: x\n"
        )
        endpoint = DriverEndpoint("launch.example.com", "node-a", tmp_path / "kubelet", tmp_path / "cdi")
        argv = driver_argv(endpoint, kubeconfig=kubeconfig, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi")
        assert launches_driver(argv), f"the reference driver's command line is the launcher's to run: {argv}"
        child = launcher.launch(argv[3:], tmp_path / "driver.log")
        yield child
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait(EXIT_TIMEOUT)


def test_a_forked_instance_reports_its_exit_code_and_output_as_a_new_process_would(
    launcher: DriverLauncher, tmp_path: Path
) -> None:
    log = tmp_path / "driver.log"
    codes = (launcher.launch(["--help"], log).wait(EXIT_TIMEOUT), launcher.launch(["--bogus"], log).wait(EXIT_TIMEOUT))
    assert codes == (0, 2), f"exit codes of --help and a bad option: {codes}; log: {log.read_text()[-500:]}"
    assert "--driver-name" in log.read_text(), f"the instance's output goes to its log: {log.read_text()!r}"


def test_an_instance_gets_the_environment_its_request_names(launcher: DriverLauncher, tmp_path: Path) -> None:
    """The driver reads its device count from $FAKE_DRA_DEVICES without --devices: a bad value is refused."""
    log = tmp_path / "driver.log"
    argv = ["--driver-name=env.example.com", "--node-name=node-a"]
    code = launcher.launch(argv, log, {"FAKE_DRA_DEVICES": "many"}).wait(EXIT_TIMEOUT)
    assert code == 2, f"exit code {code}, expected argparse's 2; log: {log.read_text()[-500:]}"
    assert "FAKE_DRA_DEVICES must be a whole number, got 'many'" in log.read_text(), log.read_text()[-500:]
    assert "FAKE_DRA_DEVICES" not in os.environ, "the test's own environment names no device count"


def test_a_wait_on_a_running_instance_times_out_as_popen_does(hung_instance: ForkedChild) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        hung_instance.wait(STILL_RUNNING_WINDOW)
    assert hung_instance.poll() is None, f"exit code {hung_instance.returncode} of an instance that should hang"


def test_a_killed_instance_reports_the_signal_and_is_reaped(hung_instance: ForkedChild) -> None:
    hung_instance.send_signal(signal.SIGKILL)
    code = hung_instance.wait(EXIT_TIMEOUT)
    assert code == -signal.SIGKILL, f"exit code {code}, expected -{int(signal.SIGKILL)} as subprocess reports it"
    with pytest.raises(ProcessLookupError):
        os.kill(hung_instance.pid, 0)  # reaped by the launcher: no zombie is left


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_closing_the_launcher_ends_its_instances(launcher: DriverLauncher, hung_instance: ForkedChild) -> None:
    launcher.close()
    assert hung_instance.wait(EXIT_TIMEOUT) == -signal.SIGKILL, "the launcher's end is reported as the instance's"
    waits.until(
        lambda: _alive(hung_instance.pid),
        lambda alive: not alive,
        timeout=EXIT_TIMEOUT,
        what=f"instance pid {hung_instance.pid} ended by SIGKILL after its launcher died (PR_SET_PDEATHSIG)",
    )

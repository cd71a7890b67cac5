"""Only what the chosen run needs is built: no metrics-server nor upstream test driver for a default run."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import cli, paths
from dra_conformance.backends.local import build
from dra_conformance.backends.local.build import COMPONENTS, ON_DEMAND, Binaries, BinaryBuilder, Component, Step, select
from dra_conformance.backends.local.components.metrics_adapter import MetricsAdapter
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.supervised import SupervisedCluster
from dra_conformance.backends.registry import local_components
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.profile import BINARY_PLACEHOLDER, ProcessTemplate, RunSpec, render
from dra_conformance.errors import BackendError, UsageError
from dra_conformance.timeouts import Timeouts

UPSTREAM = paths.CHECKOUT / "fixtures" / "profiles" / "upstream-test-driver.yaml"
EVERY_RUN = ["etcd", "kwok", "kube", "reference_driver_go"]


def _names(components: tuple[Component, ...]) -> list[str]:
    return [component.name for component in components]


def test_a_default_run_builds_neither_metrics_server_nor_the_upstream_test_driver() -> None:
    assert _names(local_components(SuiteConfig())) == EVERY_RUN
    assert _names(local_components(SuiteConfig(metrics="none"))) == EVERY_RUN


def test_a_profile_that_runs_the_upstream_test_driver_builds_it() -> None:
    assert _names(local_components(SuiteConfig(profile=UPSTREAM))) == [*EVERY_RUN[:3], "dra_test_driver", EVERY_RUN[3]]


def test_the_real_metrics_server_is_built_for_a_cluster_that_runs_it() -> None:
    names = _names(local_components(SuiteConfig(metrics="metrics-server")))
    assert names == ["etcd", "kwok", "kube", "metrics_server", "reference_driver_go"], names


def test_all_builds_every_component_whatever_the_profile_and_metrics() -> None:
    assert local_components(SuiteConfig(), everything=True) == COMPONENTS
    assert select(everything=True) == COMPONENTS
    assert ON_DEMAND < {component.name for component in COMPONENTS}


def test_a_profile_names_its_binaries_in_every_template_of_every_build() -> None:
    run = RunSpec(
        ProcessTemplate(("{bin:reference_driver_go}",), ("--node={node}",)),
        create_dirs=("{data_dir}/x",),
        versions={"previous": ProcessTemplate(("{python}",), env={"PLUGIN": "{bin:dra_test_driver}"})},
    )
    assert run.binaries() == {"reference_driver_go", "dra_test_driver"}
    # A name that is no component of COMPONENTS is not built; rendering it is then one line.
    assert _names(select({"sonobuoy"})) == EVERY_RUN


def test_binaries_not_built_are_left_out_of_the_placeholders_and_refused_in_one_line(tmp_path: Path) -> None:
    binaries = Binaries.of({name: tmp_path / name for name in EVERY_RUN})
    assert binaries.metrics_server is None and binaries.dra_test_driver is None
    assert sorted(binaries.built()) == sorted(EVERY_RUN)
    values = {f"{BINARY_PLACEHOLDER}:{name}": str(path) for name, path in binaries.built().items()}
    with pytest.raises(UsageError, match=r"no value for placeholder \{bin:dra_test_driver\}$"):
        render("{bin:dra_test_driver}", values)
    layout = ClusterLayout(tmp_path / "cluster")
    layout.pki.mkdir(parents=True)
    adapter = MetricsAdapter("metrics-server", 21007, binaries.metrics_server)
    with pytest.raises(BackendError, match="metrics-server: its binary was not built for this cluster"):
        adapter.command(SupervisedCluster(layout, Timeouts()))


def test_the_progress_counts_only_the_selected_components(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Go: each build writes its target; the "component N of M" lines and the summary name the selection only."""

    def path(_builder: BinaryBuilder, component: Component) -> Path:
        return tmp_path / "cache" / "bin" / component.name / component.name

    def fake_build(builder: BinaryBuilder, component: Component, target: Path, step: Step) -> None:
        builder.echo(f"building {component.name}: {step.left(0.0)}")
        target.write_text("")

    monkeypatch.setattr(BinaryBuilder, "path", path)
    monkeypatch.setattr(BinaryBuilder, "_build", fake_build)
    messages: list[str] = []
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=1, echo=messages.append)
    binaries = builder.ensure_selected(select())
    starts = [m.split(",")[0] for m in messages if m.startswith("building ")]
    assert starts == [f"building {name}: component {n} of 4" for n, name in enumerate(EVERY_RUN, 1)], messages
    assert messages[-1].startswith("built 4 of 4 components"), messages
    assert binaries.metrics_server is None and binaries.dra_test_driver is None
    messages.clear()
    everything = builder.ensure_all()
    starts = [m.split(",")[0] for m in messages if m.startswith("building ")]
    assert starts == ["building metrics_server: component 1 of 2", "building dra_test_driver: component 2 of 2"]
    assert messages[-1].startswith("built 2 of 6 components") and "4 were cached" in messages[-1], messages
    assert everything.built() == {c.name: path(builder, c) for c in build.COMPONENTS}


def test_the_build_command_builds_what_its_profile_and_metrics_need_or_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[SuiteConfig, bool]] = []

    def fake_build(config: SuiteConfig, *, everything: bool = False) -> dict[str, Path]:
        asked.append((config, everything))
        return {}

    monkeypatch.setattr(cli, "build_local_binaries", fake_build)
    cache = ["--cache-dir", str(tmp_path)]
    assert cli.main(["build", *cache]) == cli.EXIT_OK
    assert cli.main(["build", "--all", *cache]) == cli.EXIT_OK
    assert cli.main(["build", "--profile", str(UPSTREAM), "--metrics", "metrics-server", *cache]) == cli.EXIT_OK
    (default, everything_off), (_, everything_on), (chosen, _) = asked
    assert (default.profile, default.metrics, everything_off) == (None, "fake", False)
    assert everything_on
    assert (chosen.profile, chosen.metrics) == (UPSTREAM, "metrics-server"), chosen
    capsys.readouterr()

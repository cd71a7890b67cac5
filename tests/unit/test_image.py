"""The image builder's pure logic: deterministic layers and archives, config and manifest, cache key, lock files."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest
from kubernetes import client, config

from dra_conformance import cli
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.errors import UsageError
from dra_conformance.image import builder, oci, recipes, rootfs, wheels
from dra_conformance.kube.client import in_cluster_kubeconfig

EPOCH = recipes.DEFAULT_SOURCE_DATE_EPOCH


def _tree(root: Path) -> Path:
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev" / "null-stand-in").write_text("not in the layer")
    (root / "usr" / "bin" / "python3").write_bytes(b"interpreter")
    os.link(root / "usr" / "bin" / "python3", root / "usr" / "bin" / "python3.11")
    (root / "usr" / "bin" / "py").symlink_to("python3")
    (root / "usr" / "local" / "bin" / "dra-conformance").write_text("#!/usr/bin/python3\n")
    return root


def _members(layer: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(layer) as tar:
        return tar.getmembers()


def test_layer_is_the_same_bytes_whatever_the_order_and_file_times(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "root")
    first = oci.write_layer(oci.tree_entries(tree), tmp_path / "a.tar", EPOCH)
    os.utime(tree / "usr" / "bin" / "python3", (1, 1))
    second = oci.write_layer(list(reversed(oci.tree_entries(tree))), tmp_path / "b.tar", EPOCH)
    assert first == second, (first, second)
    assert first.digest == f"sha256:{hashlib.sha256((tmp_path / 'a.tar').read_bytes()).hexdigest()}"


def test_layer_members_are_sorted_with_fixed_time_and_numeric_owners(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "root")
    oci.write_layer(oci.tree_entries(tree, skip=("dev",)), tmp_path / "layer.tar", EPOCH)
    members = _members(tmp_path / "layer.tar")
    names = [member.name for member in members]
    assert names == sorted(names), names
    assert {(m.mtime, m.uname, m.gname) for m in members} == {(EPOCH, "", "")}, members
    assert "dev" in names and "dev/null-stand-in" not in names, names


def test_a_file_with_two_names_is_stored_once_and_linked_under_the_later_name(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "root")
    by_name = {entry.path: entry for entry in oci.tree_entries(tree)}
    assert by_name["usr/bin/python3"].kind == "file"
    assert (by_name["usr/bin/python3.11"].kind, by_name["usr/bin/python3.11"].link) == ("hardlink", "usr/bin/python3")
    assert (by_name["usr/bin/py"].kind, by_name["usr/bin/py"].link) == ("symlink", "python3")


def test_python_layer_holds_usr_local_and_its_parents_only(tmp_path: Path) -> None:
    entries = oci.tree_entries(_tree(tmp_path / "root"))
    lower, upper = builder.split_layers(entries, recipes.PYTHON_LAYER_PREFIX)
    assert [e.path for e in upper] == ["usr", "usr/local", "usr/local/bin", "usr/local/bin/dra-conformance"]
    assert not [e.path for e in lower if e.path.startswith("usr/local")], lower


def test_config_and_manifest_name_the_layers_runtime_and_labels() -> None:
    layers = [oci.Blob("sha256:" + "a" * 64, 10), oci.Blob("sha256:" + "b" * 64, 20)]
    docs = oci.documents("example.io/suite:0.1.0", recipes.SUITE.config, layers, EPOCH)
    image_config = json.loads(docs.config)
    assert image_config["rootfs"]["diff_ids"] == [layer.digest for layer in layers]
    assert image_config["created"] == "2026-01-01T00:00:00Z"
    assert image_config["config"]["Entrypoint"] == ["/usr/local/bin/dra-conformance"]
    assert image_config["config"]["Labels"] == dict(recipes.SUITE.config.labels)
    manifest = json.loads(docs.manifest)
    assert [(layer["digest"], layer["size"]) for layer in manifest["layers"]] == [(b.digest, b.size) for b in layers]
    assert manifest["config"]["digest"] == f"sha256:{hashlib.sha256(docs.config).hexdigest()}"
    [entry] = json.loads(docs.index)["manifests"]
    assert entry["digest"] == docs.digest == f"sha256:{hashlib.sha256(docs.manifest).hexdigest()}"
    assert entry["annotations"] == {
        "io.containerd.image.name": "example.io/suite:0.1.0",
        "org.opencontainers.image.ref.name": "0.1.0",
    }


def test_archive_is_the_same_bytes_twice_and_its_blobs_match_their_digests(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    oci.write_layer(oci.tree_entries(_tree(tmp_path / "root")), layer, EPOCH)
    first = oci.write_archive("example.io/x:1", recipes.REFERENCE_DRIVER_CONFIG, [layer], tmp_path / "a.tar", EPOCH)
    second = oci.write_archive("example.io/x:1", recipes.REFERENCE_DRIVER_CONFIG, [layer], tmp_path / "b.tar", EPOCH)
    assert first == second == oci.archive_digest(tmp_path / "a.tar")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith("blobs/sha256/"):
                content = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert member.name.rsplit("/", 1)[1] == hashlib.sha256(content).hexdigest(), member.name
    assert not list(tmp_path.glob("*.partial")), list(tmp_path.iterdir())


def _checkout(root: Path) -> Path:
    sources = ("pyproject.toml", "drivers/fake-metrics/fake_metrics/__init__.py", "drivers/dra-wire/dra_wire/x.py")
    for relative in sources:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(relative)
    return root


def _recipe(lock: Path) -> recipes.Recipe:
    lock.write_text(wheels.render_lock([wheels.Locked("grpcio", "1.85.3", "0" * 64)], "test lock"))
    return recipes.Recipe(
        "example", "example.io/fake-metrics", recipes.IMAGE_DIR / "debian-packages.txt",
        ("drivers/dra-wire", "drivers/fake-metrics"), "fake-metrics", lock, recipes.REFERENCE_DRIVER_CONFIG,
        ("drivers/dra-wire", "drivers/fake-metrics"),
    )  # fmt: skip


def test_cache_key_follows_sources_lock_and_epoch_but_not_bytecode(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    recipe = _recipe(tmp_path / "lock.txt")
    key = builder.cache_key(recipe, checkout, EPOCH)
    cache = checkout / "drivers" / "fake-metrics" / "fake_metrics" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"bytecode")
    assert builder.cache_key(recipe, checkout, EPOCH) == key, "bytecode changed the key"
    assert builder.cache_key(recipe, checkout, EPOCH + 1) != key, "the epoch did not change the key"
    (checkout / "drivers" / "fake-metrics" / "fake_metrics" / "__init__.py").write_text("changed")
    changed_source = builder.cache_key(recipe, checkout, EPOCH)
    assert changed_source != key, "a source change did not change the key"
    recipe.lock.write_text(wheels.render_lock([wheels.Locked("grpcio", "1.85.4", "1" * 64)], "test lock"))
    assert builder.cache_key(recipe, checkout, EPOCH) != changed_source, "a new pin did not change the key"


def test_lock_round_trips_and_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    pins = [wheels.Locked("pip", "26.3", "a" * 64), wheels.Locked("grpcio", "1.85.3", "b" * 64)]
    lock = tmp_path / "lock.txt"
    lock.write_text(wheels.render_lock(pins, "header\nsecond line"))
    assert wheels.read_lock(lock) == sorted(pins)
    lock.write_text(lock.read_text() + "requests>=2\n")
    with pytest.raises(UsageError, match=r"lock.txt:5: expected 'name==version --hash=sha256:HEX'"):
        wheels.read_lock(lock)


def test_pins_from_pip_report_leave_our_distributions_out_and_need_a_sha256() -> None:
    def item(name: str, hashes: dict[str, str]) -> dict[str, object]:
        info = {"url": f"https://example.invalid/{name}.whl", "archive_info": {"hashes": hashes}}
        return {"metadata": {"name": name, "version": "1.0"}, "download_info": info}

    report = {"install": [item("Fake_Metrics", {"sha256": "f" * 64}), item("PyYAML", {"sha256": "c" * 64})]}
    assert wheels.pins_from_report(report, ["fake-metrics"]) == [wheels.Locked("pyyaml", "1.0", "c" * 64)]
    with pytest.raises(UsageError, match="no sha256 for kubernetes"):
        wheels.pins_from_report({"install": [item("kubernetes", {"md5": "0"})]}, [])


def test_the_checked_in_locks_pin_pip_and_every_wheel_once() -> None:
    for recipe in recipes.RECIPES.values():
        pins = wheels.read_lock(recipe.lock)
        names = [pin.name for pin in pins]
        assert "pip" in names and len(names) == len(set(names)), (recipe.lock, names)


def test_mmdebstrap_runs_as_root_into_a_directory_and_pip_installs_offline(tmp_path: Path) -> None:
    command = rootfs.mmdebstrap_command(
        suite="bookworm", variant="apt", packages=["python3"], dpkg_options=["path-exclude=/usr/share/man/*"],
        sources=recipes.DEBIAN_SOURCES, target=tmp_path / "rootfs", wheels=tmp_path / "wheels",
        pip_wheel="pip-26.3-py3-none-any.whl", install="fake-metrics", source_date_epoch=EPOCH,
    )  # fmt: skip
    assert command[:4] == ["mmdebstrap", "--mode=root", "--variant=apt", "--format=directory"]
    assert "--include=python3" in command and "--dpkgopt=path-exclude=/usr/share/man/*" in command
    assert command[-4:] == ["bookworm", str(tmp_path / "rootfs"), *recipes.DEBIAN_SOURCES][-4:]
    [pip] = [part for part in command if "pip install" in part]
    for needed in ("--no-index", f"SOURCE_DATE_EPOCH={EPOCH}", "PYTHONHASHSEED=0", "python3 ", " fake-metrics"):
        assert needed in pip, pip


def test_installed_packages_are_read_from_dpkg_status(tmp_path: Path) -> None:
    status = tmp_path / "var" / "lib" / "dpkg" / "status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
        "Package: apt\nStatus: install ok installed\nVersion: 2.6.1\n"
    )
    assert rootfs.installed_packages(tmp_path) == ["apt=2.6.1", "python3=3.11.2-1+b1"]


def test_scratch_directory_is_removed_when_the_build_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), rootfs.scratch_directory(tmp_path, "scratch") as scratch:
        (scratch / "rootfs" / "etc").mkdir(parents=True)
        raise RuntimeError("build failed")
    assert not (tmp_path / "scratch").exists()


def test_scrub_removes_build_time_records_and_empties_the_hosts_files(tmp_path: Path) -> None:
    built_here = ("var/log/apt/history.log", "var/cache/ldconfig/aux-cache", "var/lib/dpkg/status-old")
    for relative in (*built_here, "etc/resolv.conf", "etc/hostname"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("when and where")
    rootfs.scrub(tmp_path)
    left = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    assert left == {"etc/resolv.conf": "", "etc/hostname": ""}, left
    assert (tmp_path / "var" / "log").is_dir()


def test_in_cluster_kubeconfig_names_the_service_account_files(tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    assert in_cluster_kubeconfig({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path / "k", account) is None
    account.mkdir()
    (account / "token").write_text("token-of-the-pod")
    (account / "namespace").write_text("conformance")
    (account / "ca.crt").write_text("not read until a connection")
    assert in_cluster_kubeconfig({}, tmp_path / "k", account) is None
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    path = in_cluster_kubeconfig(environ, tmp_path / "in-cluster.kubeconfig", account)
    assert path is not None and "token-of-the-pod" not in path.read_text()
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration, persist_config=False)
    assert configuration.host == "https://[fd00::1]:443"
    assert configuration.api_key == {"BearerToken": "Bearer token-of-the-pod"}
    assert configuration.ssl_ca_cert == str(account / "ca.crt")


def test_build_without_root_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # The suite's image is the one with a root file system (the others are one Go binary); its socket relays are
    # Go builds of their own, not what this checks.
    monkeypatch.setattr(cli, "socket_relays", lambda config, architectures: {})
    cache = tmp_path / "cache"
    assert main(["image", "build", "--image", "suite", "--cache-dir", str(cache)]) == EXIT_USAGE
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "run it as root" in error, error
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))


def test_an_unreachable_debian_mirror_is_one_line_naming_it(tmp_path: Path) -> None:
    # What apt prints through mmdebstrap when deb.debian.org cannot be resolved (seen under `unshare -n`).
    failing = ["sh", "-c", "echo \"E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  "
               "Temporary failure resolving 'deb.debian.org'\"; exit 1"]  # fmt: skip
    with pytest.raises(UsageError, match=r"^the Debian mirror \(deb.debian.org\) is unreachable from here") as error:
        rootfs.run_mmdebstrap(failing, tmp_path / "build.log", dict(os.environ))
    assert "\n" not in str(error.value) and str(tmp_path / "build.log") in str(error.value)


def test_wheels_are_built_from_a_copy_of_exactly_the_hashed_files(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    for leftover in ("drivers/fake-metrics/build/lib/stale.py", "drivers/fake-metrics/fake_metrics.egg-info/PKG-INFO"):
        (checkout / leftover).parent.mkdir(parents=True, exist_ok=True)
        (checkout / leftover).write_text("not a source")
    copied = builder.copy_sources(checkout, ("pyproject.toml", "drivers/fake-metrics"), tmp_path / "src")
    files = sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file())
    assert files == ["drivers/fake-metrics/fake_metrics/__init__.py", "pyproject.toml"], files

"""Loads the engine's pytest plugin; everything else lives in dra_conformance/."""

pytest_plugins = ["dra_conformance.plugin"]

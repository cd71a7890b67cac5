"""Loads the engine's pytest plugin (and pytester for the plugin's own tests); everything else is in the engine."""

pytest_plugins = [
    "dra_conformance.plugin",
    "dra_conformance.driver_fixtures",
    "dra_conformance.scenario_fixtures",
    "dra_conformance.rbac_fixtures",
    "dra_conformance.metrics_fixtures",
    "pytester",
]

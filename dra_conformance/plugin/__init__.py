"""The pytest plugin of dra-conformance, registered through the `pytest11` entry point `dra_conformance`.

Pytest wiring only: options, hooks and fixtures, one module per contract. The work is done by the engine's
contract packages (kube, kubelet, driver, scenarios, rbac, metrics, report, backends).
"""

# Imported in this order: a module the session hooks use is registered (and assert-rewritten) before them.
pytest_plugins = [
    "dra_conformance.plugin.options",
    "dra_conformance.plugin.run_claim",
    "dra_conformance.plugin.check_ids",
    "dra_conformance.plugin.scenario_fixtures",
    "dra_conformance.plugin.rbac_fixtures",
    "dra_conformance.plugin.session",
    "dra_conformance.plugin.cluster_fixtures",
    "dra_conformance.plugin.driver_fixtures",
    "dra_conformance.plugin.metrics_fixtures",
    "dra_conformance.plugin.rollback_fixtures",
    "dra_conformance.plugin.certification_hooks",
    "dra_conformance.plugin.reports_guard",
    "dra_conformance.plugin.masking_hooks",
    "dra_conformance.plugin.artifact_masking",
    "dra_conformance.plugin.phases",
    "dra_conformance.plugin.ordering",
    "dra_conformance.plugin.real_node_group",
]

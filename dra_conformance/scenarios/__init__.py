"""The scenario catalog (fixtures/scenarios) and the runner that deploys a scenario."""

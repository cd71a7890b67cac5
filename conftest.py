"""The engine's pytest plugin comes from its `pytest11` entry point; pytester is for the plugin's own tests."""

pytest_plugins = ["pytester"]

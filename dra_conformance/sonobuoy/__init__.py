"""The suite as a Sonobuoy plugin: the plugin definition with its RBAC, and the entry its container runs."""

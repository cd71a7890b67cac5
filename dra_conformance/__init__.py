"""dra-conformance: conformance checks for Kubernetes DRA drivers and the resource Metrics API."""

__version__ = "0.1.0"

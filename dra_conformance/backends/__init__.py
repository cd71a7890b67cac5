"""Cluster backends, chosen by name: `local` (embedded default), `existing` (any kubeconfig), `kind`."""

"""Clients, kinds, builders, the tracker, waits, leak audits, namespaces, identities and preflight: the API layer."""

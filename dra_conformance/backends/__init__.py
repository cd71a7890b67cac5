"""Cluster backends: `registry` maps a name to one; `base` is the interface they share."""

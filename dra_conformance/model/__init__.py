"""Leaf data every layer shares: obligations and their registry (imports nothing else of the engine)."""

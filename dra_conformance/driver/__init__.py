"""The driver under test: its endpoints and identity, and the reference driver it can be."""

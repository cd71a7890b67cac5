"""Slice hygiene: what any driver's ResourceSlices look like to the scheduler and other consumers."""

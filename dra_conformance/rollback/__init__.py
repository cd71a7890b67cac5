"""Rollback rehearsal: device plugin <-> DRA for extended resources, phase by phase, with a state file."""

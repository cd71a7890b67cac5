"""Binding conditions: the scheduler binds a pod only once the driver says its devices are attached."""

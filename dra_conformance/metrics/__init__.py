"""The resource Metrics API: reads, availability, the reference adapter, and the verdict."""

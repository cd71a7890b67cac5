"""The resource Metrics API: reads, availability, samples, the reference adapter, and the verdict."""

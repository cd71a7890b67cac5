"""fake-metrics: a reference aggregated API server for metrics.k8s.io v1 and v1beta1, with switchable faults."""

"""One builder per component of a local cluster: each renders its own flags and knows when it is ready."""

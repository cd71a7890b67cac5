"""The run report: records every part of a run adds, and the one writer of reports/<run-id>/."""

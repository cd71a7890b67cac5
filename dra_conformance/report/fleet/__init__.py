"""The fleet report: the latest run of every cluster in one table (`dra-conformance report --fleet`).

`sources` finds the runs' summary.json files in run directories, directories of runs and tarballs; `runs` reads
one summary into a row; `merge` keeps each cluster's latest run, flags stale ones and orders disagreements first;
`markdown`, `document` and `page` render it; `command` ties them together for the CLI.

The nightly history: `nights` reads a run's plotted figures from its summary, `history` stores them (SQLite or
PostgreSQL, one schema), `trend` judges them (thresholds, the canary window, the regression rule), and `svg` and
`history_view` draw them into fleet.html.
"""

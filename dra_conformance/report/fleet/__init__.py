"""The fleet report: the latest run of every cluster in one table (`dra-conformance report --fleet`).

`sources` finds the runs' summary.json files in run directories, directories of runs and tarballs; `runs` reads
one summary into a row; `merge` keeps each cluster's latest run, flags stale ones and orders disagreements first;
`markdown`, `document` and `page` render it; `command` ties them together for the CLI.
"""

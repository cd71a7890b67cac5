"""The canary gate: may the DRA path take more traffic? Its rules, the inputs it decides from, and how they are got.

- `rules`: the rules, the policy (tolerances, fallback SLOs, error budget) and the decision (`evaluate`).
- `inputs`: what the gate decides from (`Inputs`), each input's facts, the checks' declared provocations.
- `audit`: the facts read from the cluster's audit log at the end of the run.
- `events`: the live watch of the scheduler's allocation-timeout Events while the run goes on.
- `text`: the gate's document as text, for summary.md and the printed summary.

The plugin gathers the inputs and calls `rules.evaluate`; `report` only writes the document it returns.
"""

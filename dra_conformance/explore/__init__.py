"""A model-based explorer of the kubelet-driver contract (issue 43).

Hypothesis's stateful testing drives the driver under test through random sequences of what a kubelet and a node do
to it (claims of random shapes allocated by the real scheduler, some mixing in another driver's devices, prepares and
unprepares alone, in batches and several in flight at once, repeated prepares, driver restarts by SIGKILL or SIGTERM,
a wiped CDI dir, republished pools, claims deleted, prepares of claims this node does not own, reads of the health
stream, devices failed and restored through the profile's health hooks, claims and DeviceClasses carrying the
profile's opaque config), keeps a model of what must hold, and checks the contract's invariants after every step.
A failure is shrunk to the shortest sequence that reproduces it and reported with its seed.

- `model`: the claims, their shapes and allocated devices, which are prepared and what they answered (pure);
- `invariants`: the obligations of `registry/explore.yaml` as functions of the model and what was observed (pure);
- `cdi`: which CDI device IDs a node's spec files define, and their container edits (pure);
- `world`: what the explorer does to a node (the `World` protocol) and what it observes there;
- `machine`: the rule-based state machine over a `World`;
- `runner`: budgets, seeds, the run, the shrunk finding and the explored space;
- `cluster`: the `World` of a real cluster: a set-aside fake node of the local backend, where the suite plays the
  kubelet.
"""

# The kind of the run record each exploration writes (reports/<run-id>/records/explore/), which the summary reads.
RECORD_KIND = "explore"

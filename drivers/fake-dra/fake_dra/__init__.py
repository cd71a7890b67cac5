"""fake-dra: the reference DRA kubelet plugin of dra-conformance, with faults the suites can switch on."""

// Wrapper module: the local cluster's own pause program (no dependencies).
module github.com/dra-conformance/clusters/local/pause

go 1.26.0

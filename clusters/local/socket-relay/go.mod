// Wrapper module: the node agent's socket relay (no dependencies).
module github.com/dra-conformance/clusters/local/socket-relay

go 1.26.0

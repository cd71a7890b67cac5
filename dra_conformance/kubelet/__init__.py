"""The kubelet side of DRA: the client of a driver's sockets, the kubelet role on fake nodes, call latencies."""

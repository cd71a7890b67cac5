"""The embedded `local` backend: upstream etcd, control plane and kwok nodes run as local processes."""

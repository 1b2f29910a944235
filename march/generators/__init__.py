"""Pure allocation logic: no sockets, no etcd. Clock, store and lease are injected."""

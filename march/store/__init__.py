"""Durable state behind one small interface (``base.Store``): sqlite (embedded, single node),
etcd (cluster), memory (tests); ``batch`` sends calls made together as one request."""

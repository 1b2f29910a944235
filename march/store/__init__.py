"""Durable state behind one small interface (``base.Store``): sqlite (embedded, single node),
etcd (cluster); ``batch`` sends calls made together as one request. The in-memory store for unit
tests of the pure core is a test double (``harness/march_harness/memory_store.py``) nothing here imports."""

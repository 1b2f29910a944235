"""Durable state behind one small interface (``contract.Store``): sqlite (embedded, single node),
etcd (cluster); ``batch`` sends calls made together as one request. A backup's export and a
restore's writes are operations of that interface too. The in-memory store for unit tests of the
pure core is a test double (``harness/march_harness/memory_store.py``) nothing here imports."""

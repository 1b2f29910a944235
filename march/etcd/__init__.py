"""etcd, as March uses it: value types and the client interface (``api``), every key path
(``keys``) and the gRPC client (``client``). The in-process fake the tests run on lives in
``harness/march_harness/fake_etcd.py``: nothing here imports it."""

"""etcd, as March uses it: value types and the client interface (``api``), every key path
(``keys``), the gRPC client (``client``) and an in-process fake for tests (``fake``)."""

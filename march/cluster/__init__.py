"""Cluster mode, one part per responsibility, each with an injected clock: the lease (``lease``),
the election (``election``), the node directory and topology (``directory``), planned failover
(``failover``), their wiring (``member``), and Redis Cluster key slots (``slots``)."""

"""Cluster mode: election and lease (``node``), Redis Cluster key slots (``slots``)."""

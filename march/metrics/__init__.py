"""Prometheus metrics, above the commands: the parts only the node's assembly imports.

- ``collector``: the Prometheus families, built at scrape time from the app and its counters
  (``MarchCollector``, ``registry_for``).
- ``endpoint``: ``GET /metrics`` (``MetricsServer``), serving what a collector registry renders.

What the server bumps per request and per store transaction (``NodeMetrics``) is
``march.stats.counters``, low in the house: the server-wide state (``App.metrics``) owns it.
"""

"""Metrics, in three parts that sit on three floors of the house (docs/architecture.md):

- ``counters``: what the server bumps per request and per store transaction (``NodeMetrics``),
  owned by the server-wide state (``App.metrics``); low, imports no command.
- ``collector``: the Prometheus families, built at scrape time from the app and its counters
  (``MarchCollector``, ``registry_for``); above the commands, imported only by the node's assembly.
- ``endpoint``: ``GET /metrics`` (``MetricsServer``), serving what a collector registry renders.

This package's ``__init__`` imports none of them, so importing the counters loads nothing above them.
"""

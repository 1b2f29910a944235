"""Operations commands: SLOWLOG, MONITOR, LATENCY (filled in by the observability work)."""

from __future__ import annotations

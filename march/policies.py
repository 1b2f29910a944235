"""A sequence's batch policy and timestamp limits, from its own settings and the live config.

A sequence's own settings (SEQ.CREATE/SEQ.ALTER: MINBATCH, MAXBATCH, LOOKAHEAD, MAXLEAD) win over
the configured defaults; a stored setting is clamped into today's bounds (a record written before
the bounds existed gets today's largest). Nothing here reads or writes the store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .config import Config, clamp_setting
from .generators.base import BatchPolicy, DurableBound
from .generators.timestamp import TimestampGenerator


class Policies:
    """What each sequence's settings and the config (``reconfigure``: CONFIG SET) say now."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.default = default_policy(config)

    def reconfigure(self, config: Config) -> None:
        self.config = config
        self.default = default_policy(config)

    def policy_for(self, settings: Mapping[str, Any]) -> BatchPolicy:
        # clamped: a record stored before the bounds existed (MAXBATCH 2^62) gets today's largest
        changes = {k: clamp_setting(k, int(settings[k])) for k in ("min_batch", "max_batch") if k in settings}
        return dataclasses.replace(self.default, **changes) if changes else self.default

    def lookahead_ms(self, settings: Mapping[str, Any]) -> int:
        """A timestamp sequence's lookahead: its own (SEQ.CREATE ... LOOKAHEAD) or the configured default."""
        return int(settings.get("lookahead", self.config.timestamp_lookahead_ms))

    def max_lead_ms(self, settings: Mapping[str, Any]) -> int:
        """A timestamp sequence's lead cap: its own (MAXLEAD, clamped into today's bounds: a record
        stored with 0, "no cap", gets the largest cap) or the configured default."""
        if "max_lead" in settings:
            return clamp_setting("max_lead", int(settings["max_lead"]))
        return self.config.timestamp_max_lead_ms

    def apply(self, gen: DurableBound) -> None:
        """Give a live generator what its settings (``gen.settings``) and the config say now."""
        gen.set_policy(self.policy_for(gen.settings))
        if isinstance(gen, TimestampGenerator):
            gen.set_max_lead(self.max_lead_ms(gen.settings))


def default_policy(config: Config) -> BatchPolicy:
    """The batch bounds and waits of sequences without their own (from the Config, live)."""
    return BatchPolicy(
        min_batch=config.min_batch,
        max_batch=config.max_batch,
        interval=config.batch_interval,
        watermark=config.watermark,
        max_wait=config.max_wait,
        store_timeout=config.store_timeout,
    )

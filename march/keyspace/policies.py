"""A sequence's batch policy and timestamp limits, from its own settings and the live config.

A sequence's own settings (SEQ.CREATE/SEQ.ALTER: MINBATCH, MAXBATCH, LOOKAHEAD, MAXLEAD) win over
the configured defaults; a stored setting is clamped into today's bounds (a record written before
the bounds existed gets today's largest). Nothing here reads or writes the store.

**What a stored record may hold** (``settings_problem``) is decided here, once, for every reader:
a node that builds a generator from a stored record, ``SEQ.ALTER`` repairing one, and ``march
restore`` / ``import-floors`` checking a file before they write. *Readable* (what a node needs to
serve the key): a known kind, settings that are an object, every known setting of the right type
(integers are JSON integers, never strings, floats or booleans), and for a timestamp sequence a
whole, valid layout. A record that is not readable is never served with guessed settings: the key
answers ``SEQ_UNREADABLE`` until an admin repairs it (``march.keyspace.keyspace``). *Strict* adds what
``SEQ.CREATE``/``SEQ.ALTER`` would refuse: a name no command writes, a setting of the other kind,
a value outside today's bounds, MINBATCH above MAXBATCH, an unknown preset. Restore is strict; a
node reading its own store is only as strict as readability (older records keep being clamped).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from march.config import Config, clamp_setting, setting_bounds
from march.errors import CommandError
from march.generators.bits import PRESETS, Layout
from march.generators.bound import BatchPolicy, DurableBound
from march.generators.timestamp import KIND as TIMESTAMP
from march.generators.timestamp import TimestampGenerator

KINDS = ("sequence", TIMESTAMP)
BATCH_SETTINGS = ("min_batch", "max_batch")  # a plain sequence's own (MINBATCH, MAXBATCH)
TIME_SETTINGS = ("lookahead", "max_lead")  # a timestamp sequence's own (LOOKAHEAD, MAXLEAD)
LAYOUT_NEEDED = ("time_bits", "node_bits", "seq_bits", "order", "epoch", "unit")  # Layout.from_settings reads these
LAYOUT_SETTINGS = (*LAYOUT_NEEDED, "node", "preset")
_TEXTS = ("order", "preset")  # every other setting is an integer


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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def settings_problem(kind: object, settings: object, strict: bool = False) -> str | None:
    """Why a sequence of ``kind`` with these stored ``settings`` cannot be served (None: it can);
    ``strict``: also what SEQ.CREATE/SEQ.ALTER would refuse (see the module docstring). The reason
    names the setting and never carries more than a short piece of its value."""
    if kind not in KINDS:
        return f"unknown kind {_short(kind)}"
    if not isinstance(settings, Mapping):
        return "settings is not an object"
    for name, value in settings.items():
        if name in _TEXTS:
            if not isinstance(value, str):
                return f"{name} {_short(value)} is not a string"
        elif name in (*BATCH_SETTINGS, *TIME_SETTINGS, *LAYOUT_SETTINGS) and not _is_int(value):
            return f"{name} {_short(value)} is not an integer"
    if kind == TIMESTAMP:
        problem = layout_problem(settings)
        if problem is not None:
            return problem
    if strict:
        return _strict_problem(str(kind), settings)
    return None


def layout_problem(settings: Mapping[str, Any]) -> str | None:
    """Why the layout stored in a timestamp sequence's ``settings`` cannot be read (None: it can)."""
    missing = [name for name in LAYOUT_NEEDED if name not in settings]
    if missing:
        return "no layout (" + ", ".join(missing) + " missing)"
    try:
        Layout.from_settings(settings)
    except (CommandError, TypeError, ValueError) as exc:
        return "layout: " + (exc.message.removeprefix("ERR ") if isinstance(exc, CommandError) else str(exc))
    return None


def _strict_problem(kind: str, settings: Mapping[str, Any]) -> str | None:
    own = BATCH_SETTINGS if kind == "sequence" else (*TIME_SETTINGS, *LAYOUT_SETTINGS)
    for name in settings:
        if name not in own:
            known = name in (*BATCH_SETTINGS, *TIME_SETTINGS, *LAYOUT_SETTINGS)
            kind_name = "plain" if kind == "sequence" else kind
            return f"{name} is not a setting of a {kind_name} sequence" if known else f"unknown setting {_short(name)}"
    for name in (*BATCH_SETTINGS, *TIME_SETTINGS):
        if name in settings:
            bounds = setting_bounds(name)
            if not bounds.low <= settings[name] <= bounds.high:
                return f"{name} {settings[name]} is out of range ({int(bounds.low)} .. {int(bounds.high)})"
    if "min_batch" in settings and "max_batch" in settings and settings["min_batch"] > settings["max_batch"]:
        return f"min_batch {settings['min_batch']} is above max_batch {settings['max_batch']}"
    if "preset" in settings and settings["preset"] not in PRESETS:
        return f"unknown preset {_short(settings['preset'])}"
    return None


def readable_part(kind: str, settings: object) -> dict[str, Any]:
    """The settings of a stored record that a repair keeps: those this version reads (of the
    record's kind, the right type; a layout only whole and valid); the others are dropped."""
    if not isinstance(settings, Mapping):
        return {}
    own = BATCH_SETTINGS if kind == "sequence" else TIME_SETTINGS
    kept = {k: v for k, v in settings.items() if k in own and _is_int(v)}
    if kind == TIMESTAMP and settings_problem(kind, {k: settings[k] for k in LAYOUT_SETTINGS if k in settings}) is None:
        kept.update({k: settings[k] for k in LAYOUT_SETTINGS if k in settings})
    return kept


def _short(value: object) -> str:
    """A value in a message: its repr, cut (a 2 MB string in a hostile record stays out of logs and replies)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

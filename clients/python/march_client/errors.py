"""The client's exceptions and every message it raises, as named constants.

Errors from the server keep redis-py's classes (`redis.ResponseError` and its subclasses); the
client adds its own only where the caller must act differently: the retry deadline passed
(`Unavailable`), a snowflake generator lost its worker id (`WorkerLost`), an ID does not fit a
format (`ValueError`s with the messages below).

Nothing here may turn an error into a value: an exception is never an ID.
"""

from __future__ import annotations

import redis.exceptions

# -- retries (sync.py, aio.py, _retry.py) ----------------------------------------------------
UNAVAILABLE = "march unavailable for {seconds:.1f}s ({attempts} attempts); last error: {last}"
TOO_MANY_REDIRECTS = "more than {hops} MOVED redirects in a row (last to {address})"
BAD_REPLY = "unexpected reply to {command}: {reply!r}"
BAD_RANGE_SIZE = "n must be between 1 and {limit}, got {n}"
NO_ADDRESS = "give a url or a non-empty list of nodes, not both"
BAD_ADDRESS = "cannot read {value!r} as host:port"
BAD_SCHEME = "unsupported URL scheme {scheme!r}: use redis:// or rediss://"
CLOSED = "this sequencer is closed"

# -- prefetch (prefetch.py) ------------------------------------------------------------------
PREFETCH_BUSY = "no range of {key!r} within {seconds:.1f}s: the fetch before ours is still retrying"
FORKED = "this range belongs to the parent process (forked): take a new iterator in the child"
BAD_PREFETCH_BOUNDS = "need 1 <= min_range <= max_range <= max_incrby, got {low}, {high}, {limit}"

# -- formats (formats.py) --------------------------------------------------------------------
NEGATIVE_ID = "IDs are non-negative integers, got {value}"
NOT_BASE62 = "not a base62 string: {text!r}"
NOT_DECIMAL = "not a string of decimal digits: {text!r}"
TOO_WIDE = "{value} needs more than {width} digits"
NOT_JS_SAFE = "ID {value} is above 2**53-1: JavaScript numbers cannot hold it exactly"
BAD_BITS = "bits must be between 8 and 64, got {bits}"
OUT_OF_DOMAIN = "{value} does not fit in {bits} bits"
BAD_KEY = "the key must be at least 16 bytes"
BAD_DATED = "not a dated ID: {text!r}"
MISSING_AFFIX = "{text!r} does not have the {what} {affix!r}"

# -- snowflake (snowflake.py) ----------------------------------------------------------------
WORKER_LOST = "worker id {worker} of {namespace!r} is no longer held ({why}): no IDs until a new generator starts"
WORKER_CLOSED = "this snowflake generator is closed"
WORKER_BAD_REPLY = "unexpected reply to {command}: {reply!r}"
WORKER_TIME_EXHAUSTED = "Unix time {ms} ms does not fit the 41-bit time field (epoch {epoch_ms}, {limit_ms} ms long)"

# -- ORM integrations (orm/) -----------------------------------------------------------------
ORM_NO_SEQUENCE = "MarchIDField needs sequence='<name of the March sequence>'"
ORM_NO_SEQUENCER = "MarchIDField has no sequencer: pass sequencer=... or set MARCH_URL (or MARCH_OPTIONS nodes)"
ORM_NO_DEFAULT = "MarchIDField takes no default: its value is drawn from March when the row is saved"


class MarchClientError(redis.exceptions.RedisError):
    """Base of the client's own errors (a `redis.RedisError`, so one `except` catches both)."""


class Unavailable(MarchClientError, redis.exceptions.ConnectionError):
    """No node answered with an ID before the retry deadline. The request may or may not have been
    applied on the server; either way the caller got no ID (at worst the sequence has a gap)."""


class WorkerLost(MarchClientError):
    """A snowflake generator could not keep its worker id: it hands out nothing more."""

"""Throttling of failed authentications: ``AuthThrottle``, one table of failures per source address,
per user and per known (address, user) pair, across connections. The server keeps two, never
shared: AUTH's (``app.auth_throttle``: HELLO ... AUTH too) and the forwarding links' proofs
(``app.link_throttle``: per source address and per claimed node, ``commands.forward``).

What it must never do: keep a password (wrong ones are kept only as HMACs under a key of this
process), grow without bound (every table is capped), or let one tenant's guesses slow the
logins of another that knows its password (see ``AuthThrottle``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

THROTTLE_FREE = 3  # failures of one address or user answered at once; after that, attempts are spaced...
THROTTLE_FIRST = 0.05  # ...this many seconds apart, doubling with each further failure...
THROTTLE_MAX = 2.0  # ...up to this: one address, or one user from anywhere, gets at most a guess every 2 s
THROTTLE_QUEUE = 4.0  # an attempt that would wait longer than this (others are queued before it) is refused
THROTTLE_FORGET = 60.0  # seconds without a failure after which an address or user starts afresh
THROTTLE_ENTRIES = 10_000  # records per table (addresses, users, known pairs): the oldest go first
# Wrong passwords remembered per (address, user): a client library that retries a failed AUTH by
# itself (redis-py 8 does, ten times) repeats one mistake, which is no new guess.
THROTTLE_GUESSES = 4


def _spacing(failures: int) -> float:
    """Seconds between two checked attempts of an address or user with this many failures."""
    return min(THROTTLE_MAX, THROTTLE_FIRST * 2.0 ** (failures - THROTTLE_FREE))


_Key = TypeVar("_Key", str, tuple[str, str])  # an address, a user, or a known (address, user) pair


@dataclass
class _Guesses:
    """The wrong passwords an (address, user) pair tried lately, as keyed digests (never the passwords)."""

    last: float
    digests: list[bytes] = field(default_factory=list)


@dataclass
class _Tries:
    failures: int = 0
    pending: int = 0  # attempts admitted and not yet checked (counted as failures when spacing the next)
    last: float = 0.0  # when this address or user last tried
    next_at: float = 0.0  # the earliest time its next attempt is checked


class AuthThrottle:
    """Failed AUTHs counted per source address and per user, across connections, so that opening
    connection after connection gains no guesses. After ``THROTTLE_FREE`` failures of an address
    (or of a user, from anywhere) its attempts are checked one at a time, ``THROTTLE_FIRST``
    seconds apart doubling with each failure to ``THROTTLE_MAX``; attempts made at once queue
    (each counted as if the ones before it failed), and one whose turn is further than
    ``THROTTLE_QUEUE`` away is refused without being checked. So one address, or one user, gets at
    most one guess every ``THROTTLE_MAX`` seconds however many connections it opens.

    Another tenant guessing passwords must not slow the logins of those who know theirs: an
    (address, user) pair that has authenticated before is held back only by failures of that same
    pair, never by the user's failures from elsewhere nor by its address's failures on other users
    (behind a NAT or a load balancer every tenant shares one address). Its own failures still count
    for its address, so guessing never gets cheaper. Only someone guessing from the very address a
    user logs in from, for that very user, slows that user: a guesser indistinguishable from it. A
    success clears its address's failures. Every table is bounded (``THROTTLE_ENTRIES``, the least
    recently touched go first): a flood of addresses or user names costs bounded memory. ``clock``
    is monotonic seconds (injected).

    A wrong password an address already tried for a user within ``THROTTLE_FORGET`` (one of its last
    ``THROTTLE_GUESSES``) is no new guess: ``repeated`` says so, and such an attempt is checked at
    once (the password may have been set since) and counts nowhere. So a client library retrying a
    mistyped password (redis-py 8 reconnects and sends it ten more times) gets WRONGPASS at once
    each time and leaves the throttle as one failure would, while every different password is a
    guess and waits its turn. The passwords are kept only as HMACs under a key of this process.

    Each ``admit`` that returns a wait is followed by ``failed``, ``succeeded`` or (the connection
    went away before its turn) ``abandoned``; a ``repeated`` attempt is not admitted (``succeeded``
    with ``admitted=False`` if it is right after all).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, entries: int = THROTTLE_ENTRIES) -> None:
        self.clock = clock
        self.entries = entries
        self._addrs: OrderedDict[str, _Tries] = OrderedDict()
        self._users: OrderedDict[str, _Tries] = OrderedDict()
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._pairs: OrderedDict[tuple[str, str], _Tries] = OrderedDict()  # failures of known pairs
        self._guesses: OrderedDict[tuple[str, str], _Guesses] = OrderedDict()  # wrong passwords of pairs
        self._key = os.urandom(16)  # what the wrong passwords are kept under: never the passwords themselves

    def _get(self, table: OrderedDict[_Key, _Tries], key: _Key, now: float) -> _Tries:
        tries = table.get(key)
        if tries is None or (now - tries.last > THROTTLE_FORGET and tries.next_at <= now):
            tries = table[key] = _Tries(last=now)
        table.move_to_end(key)
        while len(table) > self.entries:
            table.popitem(last=False)
        return tries

    def _records(self, addr: str, user: str, now: float) -> list[_Tries]:
        """The records that space this attempt: a known pair's own, else its address's and user's."""
        if (addr, user) in self._known:
            return [self._get(self._pairs, (addr, user), now)]
        return [self._get(self._addrs, addr, now), self._get(self._users, user, now)]

    def admit(self, addr: str, user: str) -> float | None:
        """Seconds until this attempt may be checked (0: now), its turn taken; None: refused (too many before it)."""
        now = self.clock()
        records = self._records(addr, user, now)
        turn = max([now, *(r.next_at for r in records if r.failures + r.pending >= THROTTLE_FREE)])
        if turn - now > THROTTLE_QUEUE:
            return None
        for r in records:
            tried = r.failures + r.pending + 1  # as if this one fails too
            if tried >= THROTTLE_FREE:
                r.next_at = max(r.next_at, turn + _spacing(tried))
            r.pending += 1
            r.last = now
        return turn - now

    def _digest(self, user: str, password: bytes) -> bytes:
        message = user.encode("utf-8", "surrogateescape") + b"\0" + password
        return hmac.new(self._key, message, hashlib.sha256).digest()[:16]

    def repeated(self, addr: str, user: str, password: bytes) -> bool:
        """Whether ``password`` is a wrong one this address tried for ``user`` lately: no new guess."""
        seen = self._guesses.get((addr, user))
        if seen is None:
            return False
        if self.clock() - seen.last > THROTTLE_FORGET:
            del self._guesses[(addr, user)]
            return False
        return self._digest(user, password) in seen.digests

    def know(self, addr: str, user: str) -> None:
        """Take (``addr``, ``user``) as a known pair from now on (as after a success), its address's
        failures kept: another way than a success to know who is who (a node's registered address)."""
        self._known[(addr, user)] = None
        self._known.move_to_end((addr, user))
        while len(self._known) > self.entries:
            self._known.popitem(last=False)

    def failed(self, addr: str, user: str, password: bytes | None = None) -> None:
        """An admitted attempt failed; ``password``: the wrong password (remembered as a digest, so that
        trying it again is no new guess: ``repeated``)."""
        now = self.clock()
        if password is not None:
            seen = self._guesses.get((addr, user))
            if seen is None or now - seen.last > THROTTLE_FORGET:
                seen = self._guesses[(addr, user)] = _Guesses(now)
            seen.last = now
            seen.digests = [*seen.digests[-(THROTTLE_GUESSES - 1) :], self._digest(user, password)]
            self._guesses.move_to_end((addr, user))
            while len(self._guesses) > self.entries:
                self._guesses.popitem(last=False)
        records = self._records(addr, user, now)
        if (addr, user) in self._known:
            records.append(self._get(self._addrs, addr, now))  # a known pair's failure counts for its address
        for r in records:
            r.pending = max(0, r.pending - 1)
            r.failures += 1
            r.last = now
            if r.failures >= THROTTLE_FREE:
                r.next_at = max(r.next_at, now + _spacing(r.failures))

    def abandoned(self, addr: str, user: str) -> None:
        for r in self._records(addr, user, self.clock()):
            r.pending = max(0, r.pending - 1)

    def succeeded(self, addr: str, user: str, admitted: bool = True) -> None:
        if admitted:
            self.abandoned(addr, user)
        self._addrs.pop(addr, None)
        self._pairs.pop((addr, user), None)
        self._guesses.pop((addr, user), None)
        self.know(addr, user)

    def __len__(self) -> int:
        return len(self._addrs) + len(self._users) + len(self._known) + len(self._pairs) + len(self._guesses)

"""`SnowflakeGenerator`: snowflake IDs made in this process, under a worker id leased from March.

Layout (the classic snowflake, high to low): 41 bits of milliseconds since `EPOCH_MS`
(2020-01-01T00:00:00Z, so the time bits last until 2089-09), 10 bits of worker id (0..1023),
12 bits of sequence (4096 IDs per millisecond). IDs are < 2**63 (positive signed 64-bit).

How it stays unique without asking the server per ID:
- The worker id comes from ``WORKER.ACQUIRE ns TTL s``; no two live holders share one. A background
  thread renews every ttl/3. Each renew declares ``UPTO ms``, a time this generator will not pass
  before its next renew; the server stores it durably before replying and gives the highest
  declared bound as ``floor_ms`` to the next holder of the id, which only issues times above it.
- This generator issues only times in ``(floor_ms, upto]`` where ``upto`` is the last bound the
  server confirmed. So even a holder that was paused past its lease cannot overlap the next one.
- It stops (raises `WorkerLost`) once its own deadline passes: the monotonic SEND time of the last
  successful renew plus the TTL, minus a safety margin, which is before the server's expiry (the
  server counts on its monotonic clock from when it began writing the renew, or from its own
  start after a failover or restart: never earlier than our send). A renew that then succeeds lets it go on (the
  token still held means nobody took the id); a refused token ends it for good.
- Within one generator IDs strictly increase even when the wall clock goes back: the time used is
  max(last time, wall clock); when the 4096 sequence values of a millisecond run out it moves to the
  next millisecond, but never past ``upto`` (it waits for a renew instead, up to its deadline).

What it must never do: issue an ID without a confirmed bound covering its time, reuse a time at or
below ``floor_ms``, or go on after the server refused its token. On `close` it releases the id
(declaring the last time it used); unused sequence values are simply never issued.

Fork: a child process's copy of a generator is dead (`WorkerLost`): the worker id is the parent's.
Make a new generator in the child.

Thread-safe (one lock per ID, about a microsecond). IDs from different generators are unique but
only roughly time-ordered (each follows its own clock).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, Self

import redis.exceptions as rex

from march_client import errors
from march_client._retry import Action, classify
from march_client.sync import Sequencer

EPOCH_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z: recent, so the 41 time bits last until 2089
TIME_BITS, WORKER_BITS, SEQ_BITS = 41, 10, 12
MAX_SEQ = (1 << SEQ_BITS) - 1
MAX_WORKER = (1 << WORKER_BITS) - 1
DEFAULT_TTL = 30  # seconds: a crashed process blocks its id for ttl + the server's worker_margin
SAFETY = 0.1  # of the TTL (at most MAX_SAFETY s) the local deadline ends early: clock rate differences
MAX_SAFETY = 1.0
RETRY_PAUSE = 0.1  # seconds between renew attempts once a renew has failed


def wall_ms() -> int:
    """Unix time in milliseconds (the default clock; tests inject their own)."""
    return time.time_ns() // 1_000_000


class Decoded(NamedTuple):
    unix_ms: int
    worker: int
    sequence: int


def compose(unix_ms: int, worker: int, sequence: int, epoch_ms: int = EPOCH_MS) -> int:
    return ((unix_ms - epoch_ms) << (WORKER_BITS + SEQ_BITS)) | (worker << SEQ_BITS) | sequence


def decode(value: int, epoch_ms: int = EPOCH_MS) -> Decoded:
    """The fields of a snowflake ID of this layout."""
    return Decoded((value >> (WORKER_BITS + SEQ_BITS)) + epoch_ms, (value >> SEQ_BITS) & MAX_WORKER, value & MAX_SEQ)


class SnowflakeGenerator:
    """Snowflake IDs under a worker id of ``namespace`` held from March (see the module docstring).

    ``sequencer_or_url``: a `Sequencer` (its connections and routing are used; not closed here) or
    a URL (extra keyword arguments go to the `Sequencer` made for it). ``ttl``: seconds the server
    holds the id without a renew. ``clock`` (Unix ms) and ``monotonic`` (seconds) are injectable.
    The constructor acquires the id and declares a first bound before returning.
    """

    def __init__(
        self,
        sequencer_or_url: Sequencer | str,
        namespace: str | bytes,
        ttl: int = DEFAULT_TTL,
        *,
        clock: Callable[[], int] = wall_ms,
        monotonic: Callable[[], float] = time.monotonic,
        epoch_ms: int = EPOCH_MS,
        **sequencer_kwargs: Any,
    ) -> None:
        if isinstance(sequencer_or_url, Sequencer):
            self._sequencer, self._owned = sequencer_or_url, False
        else:
            self._sequencer, self._owned = Sequencer(sequencer_or_url, **sequencer_kwargs), True
        self.namespace = namespace
        self.epoch_ms = epoch_ms
        self._clock = clock
        self._monotonic = monotonic
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._closed = False
        self._lost: str | None = None  # why the token is gone: final
        try:
            sent = monotonic()
            reply = self._call("WORKER.ACQUIRE", namespace, "TTL", ttl, retry_for=max(ttl / 2, 1.0))
            if not (isinstance(reply, list) and len(reply) == 4):
                raise rex.ResponseError(errors.WORKER_BAD_REPLY.format(command="WORKER.ACQUIRE", reply=reply))
            worker, token, granted, floor_ms = reply
            self.worker_id: int = int(worker)
            self._token: bytes = token if isinstance(token, bytes) else str(token).encode()
            self.ttl: int = int(granted)
            self.floor_ms: int = int(floor_ms)
            self._safety = min(self.ttl * SAFETY, MAX_SAFETY)
            self._deadline = sent + self.ttl - self._safety
            # Nothing issued yet, and nothing may be above floor_ms until the server confirms a bound:
            # (floor_ms, MAX_SEQ) makes the first ID's time floor_ms + 1 or later.
            self._last_ms, self._last_seq = self.floor_ms, MAX_SEQ
            self._upto = self.floor_ms
            self._renew()  # the first bound, before any ID
        except BaseException:
            if self._owned:
                self._sequencer.close()
            raise
        self._thread = threading.Thread(target=self._renew_loop, name="march-snowflake-renew", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _forked(self) -> None:
        """In a child process after fork: the id and everything issued under it are the parent's."""
        self._cond = threading.Condition()  # the parent's lock may have been held by another thread
        self._lost = "this process is a fork of the one holding it"

    # -- issuing ------------------------------------------------------------------------------
    def next(self) -> int:
        """The next ID: strictly greater than every ID this generator issued before."""
        with self._cond:
            while True:
                self._check()
                last_ms, last_seq, upto = self._last_ms, self._last_seq, self._upto
                now = self._clock()
                if now > last_ms:
                    ms, seq = now, 0
                elif last_seq < MAX_SEQ:
                    ms, seq = last_ms, last_seq + 1
                else:
                    ms, seq = last_ms + 1, 0  # this millisecond is full: carry into the next
                if ms > upto:
                    # The wall clock (or a carry) is past the bound: use what is left of the bound's last ms.
                    if last_ms < upto:
                        ms, seq = upto, 0
                    elif last_ms == upto and last_seq < MAX_SEQ:
                        ms, seq = upto, last_seq + 1
                    else:
                        self._wake.set()  # ask for a renew now, and wait for it (at most to the deadline)
                        self._cond.wait(max(0.0, min(RETRY_PAUSE, self._deadline - self._monotonic())))
                        continue
                if not 0 <= ms - self.epoch_ms < 1 << TIME_BITS:
                    raise errors.MarchClientError(
                        errors.WORKER_TIME_EXHAUSTED.format(ms=ms, epoch_ms=self.epoch_ms, limit_ms=1 << TIME_BITS)
                    )
                self._last_ms, self._last_seq = ms, seq
                return compose(ms, self.worker_id, seq, self.epoch_ms)

    def _check(self) -> None:
        if self._closed:
            raise errors.MarchClientError(errors.WORKER_CLOSED)
        if self._lost is not None:
            raise errors.WorkerLost(
                errors.WORKER_LOST.format(worker=self.worker_id, namespace=self.namespace, why=self._lost)
            )
        if self._monotonic() >= self._deadline:
            self._wake.set()
            raise errors.WorkerLost(
                errors.WORKER_LOST.format(worker=self.worker_id, namespace=self.namespace, why="no renew in time")
            )

    def decode(self, value: int) -> Decoded:
        return decode(value, self.epoch_ms)

    @property
    def upto_ms(self) -> int:
        """The time bound the server has confirmed: no ID of this generator has a later time."""
        return self._upto

    # -- the lease ----------------------------------------------------------------------------
    def _call(self, *args: Any, retry_for: float) -> Any:
        return self._sequencer.router.execute(*args, retry_for=retry_for)

    def _renew(self) -> None:
        """One renew: declare a bound a TTL ahead of the time we are at, and on success move the
        deadline (from the send time) and the bound forwards."""
        with self._cond:
            upto = max(self._clock(), self._last_ms) + self.ttl * 1000
        sent = self._monotonic()
        try:
            granted = self._call(
                "WORKER.RENEW",
                self.namespace,
                self.worker_id,
                self._token,
                "UPTO",
                upto,
                retry_for=max(self.ttl / 4, 0.5),
            )
        except Exception as e:
            if classify(e) is Action.RAISE and not isinstance(e, errors.Unavailable):
                with self._cond:
                    self._lost = str(e)  # the server refused our token: the id may be someone else's
                    self._cond.notify_all()
            raise
        if not isinstance(granted, int):
            raise rex.ResponseError(errors.WORKER_BAD_REPLY.format(command="WORKER.RENEW", reply=granted))
        with self._cond:
            self._deadline = max(self._deadline, sent + granted - self._safety)
            self._upto = max(self._upto, upto)
            self._cond.notify_all()

    def _renew_loop(self) -> None:
        pause = self.ttl / 3
        while True:
            self._wake.wait(pause)
            self._wake.clear()
            if self._closed or self._lost is not None:
                return
            try:
                self._renew()
                pause = self.ttl / 3
            except Exception:  # transient: try again soon; next() raises once the deadline passes
                if self._lost is not None:
                    return
                pause = RETRY_PAUSE

    # -- end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop renewing and release the id (declaring the last time used). Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            last_ms = self._last_ms
            self._cond.notify_all()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        try:
            if self._lost is None:
                self._call(
                    "WORKER.RELEASE", self.namespace, self.worker_id, self._token, "UPTO", last_ms, retry_for=2.0
                )
        except Exception:  # not released: the id expires after its TTL, the floor already covers us
            pass
        finally:
            if self._owned:
                self._sequencer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _after_fork_in_child() -> None:
    for generator in list(_LIVE):
        generator._forked()


_LIVE: weakref.WeakSet[SnowflakeGenerator] = weakref.WeakSet()  # for the fork hook; keeps none alive
os.register_at_fork(after_in_child=_after_fork_in_child)

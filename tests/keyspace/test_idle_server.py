"""Idle sequences give their memory back (``sequence_idle_seconds``, ``march.keyspace.idle``): after the idle
time a sequence's generator leaves memory (INFO's ``active_sequences`` falls, ``idle_dropped``
counts it) and its next INCR is above every earlier ID; a sequence in use stays. A plain sequence
(no settings of its own) not in use is a row of the keyspace's table (``march.keyspace.sequence_table``:
``parked_sequences``, ``idle_parked``) and goes on without a gap."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from march_harness import MarchServer, RespConn, wait_until

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]
IDLE = 1  # seconds (the smallest allowed): a sequence leaves memory 1 to ~2 s after its last ID


def sequences_info(c: RespConn) -> dict[str, str]:
    text = c.call("INFO", "sequences").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_an_idle_sequence_leaves_memory_and_its_next_id_is_above_every_earlier_one(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--sequence-idle-seconds", str(IDLE)])
    with server.conn() as c:
        for name in ("idle", "busy"):  # settings of their own: served by a generator, never a row
            assert c.call("SEQ.CREATE", name, "MINBATCH", "10") == "OK"
        idle_ids = [c.call("INCR", "idle") for _ in range(5)]
        busy_ids = [c.call("INCR", "busy")]

        def idle_gone() -> bool:
            busy_ids.append(c.call("INCR", "busy"))  # in use all along: never dropped
            info = sequences_info(c)
            return info["active_sequences"] == "1" and info["idle_dropped"] == "1"

        wait_until(idle_gone, timeout=30, interval=0.05, message="the idle sequence leaves memory")
        after = c.call("INCR", "idle")
        assert after > max(idle_ids)
        # The busy one was never dropped: a dropped one would have jumped to its stored ceiling.
        assert busy_ids == list(range(1, len(busy_ids) + 1))
        assert c.call("EXISTS", "idle") == 1
        assert int(sequences_info(c)["active_sequences"]) == 2


def test_a_plain_sequence_not_in_use_is_a_row_and_goes_on_without_a_gap(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--sequence-idle-seconds", str(IDLE)])
    with server.conn() as c:
        assert [c.call("INCR", "plain") for _ in range(3)] == [1, 2, 3]  # created, then a row at once
        info = sequences_info(c)
        assert (info["active_sequences"], info["parked_sequences"], info["ids_issued"]) == ("0", "1", "3")
        assert c.call("GET", "plain") == b"3"  # read where it is: still a row
        assert sequences_info(c)["parked_sequences"] == "1"
        flat = c.call("SEQ.INFO", "plain")  # SEQ.INFO: a generator again, made from the row
        assert dict(zip(flat[::2], flat[1::2], strict=True))[b"next"] == 4
        info = sequences_info(c)
        assert (info["active_sequences"], info["parked_sequences"]) == ("1", "0")

        def parked() -> bool:
            info = sequences_info(c)
            return (info["active_sequences"], info["parked_sequences"], info["idle_parked"]) == ("0", "1", "1")

        wait_until(parked, timeout=30, interval=0.05, message="the idle generator leaves for a row")
        assert c.call("INCR", "plain") == 4  # the row kept the range: no gap


def test_zero_keeps_every_sequence_in_memory(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--sequence-idle-seconds", "0"])
    with server.conn() as c:
        assert c.call("SEQ.CREATE", "kept", "MINBATCH", "10") == "OK"  # (settings of its own: a generator)
        c.call("INCR", "kept")
        _, value = c.call("CONFIG", "GET", "sequence-idle-seconds")
        assert float(value) == 0
        # Turned on live: the sequence leaves memory once the new idle time has passed.
        assert c.call("CONFIG", "SET", "sequence-idle-seconds", str(IDLE)) == "OK"
        wait_until(lambda: sequences_info(c)["active_sequences"] == "0", timeout=30, interval=0.05)
        assert c.call("INCR", "kept") > 1

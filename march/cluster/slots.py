"""Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384."""

from __future__ import annotations

import binascii

SLOTS = 16384


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster hashes keys;
    ``binascii.crc_hqx`` is that very CRC, in C."""
    return binascii.crc_hqx(data, 0)


def key_slot(key: bytes) -> int:
    """The slot of ``key``: only the part inside the first non-empty ``{...}`` counts, if any."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return crc16(key) % SLOTS

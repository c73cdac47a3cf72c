"""The harness's message body: timestamps first, filler after.

`[u64 intended_us][u64 actual_us][u64 sequence][filler]`, little-endian. The intended time is
the slot of the absolute send schedule, so end-to-end latency measured from it includes any
time the producer fell behind (coordinated omission corrected, not hidden).
"""

from __future__ import annotations

import os
import struct

HEADER = struct.Struct("<QQQ")
HEADER_SIZE = HEADER.size


def body_pool(size: int, pool_size: int, random_ratio: float, payload: bytes | None) -> list[bytes]:
    """Filler bodies as OMB builds them: from a payload file, or random/zero bytes."""
    size = max(size, HEADER_SIZE)
    if payload is not None:
        base = payload.ljust(size, b"\0")[:size]
        return [base]
    count = max(1, pool_size)
    random_part = int(size * random_ratio)
    return [os.urandom(random_part) + bytes(size - random_part) for _ in range(count)]


def stamp(filler: bytes, intended_us: int, actual_us: int, sequence: int) -> bytes:
    return HEADER.pack(intended_us, actual_us, sequence) + filler[HEADER_SIZE:]


def read_stamp(body: bytes) -> tuple[int, int, int]:
    """(intended_us, actual_us, sequence); raises struct.error on a foreign message."""
    return HEADER.unpack_from(body, 0)

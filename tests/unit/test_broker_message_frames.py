"""Issue 40: a connection's deliveries of one entry are made in one go
(`MessageTemplate.frames`), byte for byte what a head per consumer makes."""

from __future__ import annotations

from pulsar_protocol.commands import encode_varint
from pulsar_protocol.message_template import MessageTemplate


def test_frames_of_many_consumers_are_each_ones_head_and_the_payload() -> None:
    payload = b"\x0e\x01" + bytes(range(256)) * 4
    ids = [encode_varint(i) for i in (0, 1, 127, 128, 300, 16_383, 16_384, 2**21, 2**35)]
    for bem in (None, b"\x08\x01"):
        for redeliveries, partition in ((0, -1), (3, 2)):
            template = MessageTemplate(7, 2**20, len(payload), bem, redeliveries, partition)
            expected = [b for v in ids for b in (template.head(v), payload)]
            fresh = MessageTemplate(7, 2**20, len(payload), bem, redeliveries, partition)
            assert fresh.frames(ids, payload) == expected  # prefixes made on the way
            assert template.frames(ids, payload) == expected
            assert all(f is payload for f in template.frames(ids, payload)[1::2])
    assert MessageTemplate(1, 1, 4, None).frames([], b"body") == []

"""The one check of a topic name a client or the admin API gives: every path that takes a name
(requests on the wire, admin calls) parses it here, so none can skip a rule."""

from __future__ import annotations

import functools
import re

MAX_TOPIC_NAME_BYTES = 255
"""The longest full name accepted, in UTF-8 bytes. Pulsar sets no limit, but a persistent
topic's folder is named after it (file systems stop at 255 bytes), and a name the size of a
frame would be kept in every stat and log line."""

_TOPIC = re.compile(r"^(persistent|non-persistent)://([^/]+)/([^/]+)/(.+)$")


class InvalidTopicName(ValueError):
    """A topic name the broker refuses; a client hears ServerError InvalidTopicName."""


@functools.lru_cache(maxsize=4096)
def parse_topic(name: str | bytes) -> tuple[bool, str]:
    """(persistent, full name); short names are expanded as Pulsar's clients expand them.
    Remembered: a connect storm names the same topic in each of 100,000 SUBSCRIBEs, checked
    twice each (the connection's name check, then the service's lookup).

    `bytes` is what protobuf hands over for a `string` field that is not valid UTF-8 (proto2
    fields are not checked on parse), so it is refused here rather than failing later.
    """
    if not isinstance(name, str):
        raise InvalidTopicName(f"topic name is not valid UTF-8: {name[:64]!r}")
    if "://" not in name:
        name = f"persistent://public/default/{name}"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 spells it
        raise InvalidTopicName(f"topic name is not valid Unicode: {name[:64]!r}") from None
    if size > MAX_TOPIC_NAME_BYTES:
        raise InvalidTopicName(
            f"topic name of {size} bytes is longer than the limit of {MAX_TOPIC_NAME_BYTES}"
        )
    match = _TOPIC.match(name)
    if not match:
        raise InvalidTopicName(f"invalid topic name {name!r}")
    return match.group(1) == "persistent", name

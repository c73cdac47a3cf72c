"""How many worker processes a run needs, and how many loopback source addresses, from the
limits of the machine rather than fixed guesses.

Two limits bound the consumers' connections (DESIGN.md, "Facts about the machines"):
- **Open files per process.** Each worker reports what its RLIMIT_NOFILE lets it hold
  (`socket_limit`, raised to the hard limit first, minus FD_MARGIN for everything else the
  process opens); the coordinator starts enough workers that each one's share of the
  connections fits in the smallest report.
- **Ephemeral ports per (source address, destination).** Every connection to one broker
  address from one source address needs its own local port, out of
  /proc/sys/net/ipv4/ip_local_port_range (32768-60999 here: 28,232). Beyond that the
  connections must come from several 127.x.y.z source addresses (bound with
  IP_BIND_ADDRESS_NO_PORT, so each has its own range): the harness asks the driver for as
  many as the count needs, when the broker is on loopback.
"""

from __future__ import annotations

import math
import resource
from pathlib import Path

FD_MARGIN = 256
"""File descriptors a worker keeps for everything but the broker connections: logs, raw
files, Locust's sockets. The drivers' socket budget keeps the same margin
(drivers/net/sockets.py, which the harness may not import: tests/unit/test_import_layers.py);
tests/unit/test_sockets.py checks the two agree."""
FILE_NR = Path("/proc/sys/fs/file-nr")
"""The kernel's open files: allocated, free (always 0 now), and fs.file-max."""
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_PORT_RANGE = (32768, 60999)  # Linux's default, when the file cannot be read
PORT_SHARE = 0.9
"""Of one source address's port range, the share the run plans to use: the rest is for
connections of other programs to the same broker port and for ports not yet free again."""
UNLIMITED = 1 << 30


def socket_limit() -> int:
    """Connections this process can hold: its open-file limit, raised to the hard limit,
    minus FD_MARGIN. Called by each worker before it reports ready (and by the coordinator for
    the local workers it is about to start, which inherit its limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # a limit the process may not raise: report what it has
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED
    return max(0, soft - FD_MARGIN)


def connections_for(consumers: int, per_connection: int, producers: int) -> int:
    """Broker connections a run opens: the consumers', multiplexed `per_connection`, and one
    per producer (at most)."""
    return math.ceil(consumers / max(1, per_connection)) + producers


def workers_needed(connections: int, limit: int) -> int:
    """The fewest workers among which `connections`, spread evenly (Locust deals users out
    in turn), fit in `limit` each."""
    if connections <= 0:
        return 1
    return math.ceil(connections / max(1, limit))


def ports_per_source(path: Path = PORT_RANGE_FILE) -> int:
    """Local ports one source address has for one destination: the ephemeral range's size."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        low, high = DEFAULT_PORT_RANGE
    return max(1, high - low + 1)


def source_addresses_needed(connections: int, ports: int) -> int:
    """Loopback source addresses for `connections` to one broker address: 0 (the kernel's
    default source, 127.0.0.1) while they fit in PORT_SHARE of one address's ports, else
    enough addresses that each stays within it."""
    usable = max(1, int(ports * PORT_SHARE))
    return 0 if connections <= usable else math.ceil(connections / usable)


def open_files_free(path: Path = FILE_NR) -> int | None:
    """Open files the kernel still hands out to all processes (fs.file-max less those
    allocated); None when it does not say."""
    try:
        allocated, _, maximum = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return None
    return maximum - allocated


def connections_problem(
    connections: int,
    *,
    bundled_broker: bool,
    broker_here: bool,
    broker_limit: int,
    free_files: int | None,
) -> str | None:
    """Why `connections` from this machine's workers cannot be opened, with the fix; None
    when they can. The broker the harness starts (`bundled_broker`: the driver file names
    none; the bundled one, or a peer's embeddedBroker) is one process: it holds what its
    open-file limit (`broker_limit`, this process's, which it inherits) holds. Every
    connection is a file at each end, so with the broker here too it takes two of the
    machine's `free_files`."""
    if bundled_broker and connections > broker_limit:
        return (
            f"the run opens {connections:,} connections and the broker the harness starts "
            f"here, one process, holds {broker_limit:,} (its open-file limit): put more "
            "consumers on each connection (consumersPerConnection), or measure a broker of "
            "your own (client.serviceUrl in the driver file)"
        )
    ends = 2 if broker_here else 1
    if free_files is not None and connections * ends > free_files:
        both = " (both ends on this machine)" if ends == 2 else ""
        return (
            f"the run opens {connections:,} connections{both} and this machine's open-file "
            f"limit (fs.file-max) leaves {free_files:,} files: lower consumersPerTopic, put "
            "more consumers on each connection (consumersPerConnection), or run workers on "
            "other hosts (--remote-workers)"
        )
    return None

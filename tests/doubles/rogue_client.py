"""A process that reaches a coordinator's port without the run's secret, as anyone on the
network can: with Locust's own client it says client_ready and worker_ready, sends a raw file
named to climb out of the run folder, forged progress and forged totals, and writes down every
frame it receives (tests/integration/test_rogue_worker.py).

    python -m tests.doubles.rogue_client HOST PORT STOP_FILE RECEIVED_FILE ESCAPE_PATH

It keeps sending until STOP_FILE exists, then writes what it received to RECEIVED_FILE.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import zmq
from locust import __version__
from locust.rpc.protocol import Message
from locust.rpc.zmqrpc import Client


def main(host: str, port: int, stop: Path, received_file: str, escape: str) -> None:
    me = "rogue_0"
    client = Client(host, port, me)
    forged = [
        Message("client_ready", __version__, me),
        Message("worker_ready", {"client_id": me, "socket_limit": 10**6, "pid": 1}, me),
        Message("raw_file", {"worker_id": "w0", "name": "../../escape", "data": b"x"}, me),
        Message("raw_file", {"worker_id": "../../..", "name": "escape", "data": b"x"}, me),
        Message("raw_file", {"worker_id": "w0", "name": escape, "data": b"x"}, me),
        Message("progress", {"worker_id": "w0", "connected": 10**6, "total_received": 10**9}, me),
        Message("finished", {"worker_id": "w0", "totals": {"sent": 10**9, "received": 10**9}}, me),
        # Locust's own, as a worker that had joined would send them.
        Message("heartbeat", {"state": "ready", "current_cpu_usage": 0}, me),
        Message("spawning_complete", {"user_classes_count": {}, "user_count": 0}, me),
    ]
    received: list[list[bytes]] = []
    while not stop.exists():
        for message in forged:
            client.send(message)
        while client.socket.poll(200, zmq.POLLIN):
            received.append(client.socket.recv_multipart())
    with open(received_file, "wb") as out:
        pickle.dump(received, out)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5])

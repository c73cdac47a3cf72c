"""The native driver's Python cost per delivery on the receive path, without sockets.

One driver `Connection` with `--consumers` ACTIVE consumers of a Broadcast subscription gets,
for each of `--entries` entries, the MESSAGE frames the bundled broker writes for it (one per
consumer, from a `MessageTemplate`, with full broker stamps), cut into recvs of RECV_SIZE
bytes as the socket returns them. Each recv is copied into the codec's pooled read buffer
where the socket's recv_into would put it (its copy stands for the kernel's), then goes
through the reader's own handling (codec, delivery grouping, the harness's Recorder,
permits), then the ack flusher's `flush_acks`. Before 2026-11-29 the bytes went in by
`receive_data`, whose buffer grew and shrank at every 1 MB read: 2.4 of a 10 KB delivery's
6 us, where the reader's pooled buffer takes 1.1 (docs/benchmarks.md).
The Recorder samples stages as a workload's `stageSampleFraction` says: all by default, as in
issue 40's workloads (one stages row per message). What it leaves out is the kernel and
gevent: the recv copies and the ack writes a real run adds. Run: `python -m
benchmarks.client_receive [--consumers N] [--entries N] [--size BYTES] [--read-size BYTES]
[--individual] [--sample-fraction F] [--profile]`.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from gevent.pool import Group

from drivers.base import ConsumerSpec
from drivers.pulsar.connection import RECV_SIZE, Connection
from drivers.pulsar.consumer import ConsumerState, subscribe_command
from drivers.pulsar.delivery import DeliveryDecoder
from drivers.pulsar.settings import ConsumerConfig, Settings
from harness.message_body import stamp
from harness.recorder import Recorder
from harness.workload import Workload
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.client_commands import SubscribesAnswered
from pulsar_protocol.commands import T, command, encode_varint
from pulsar_protocol.frames import encode_frame
from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.stamps import EntryStamps, encode_stamps

TOPIC = "persistent://public/default/bench"
SAMPLE_FRACTION = Workload.__dataclass_fields__["stage_sample_fraction"].default
"""A workload's stageSampleFraction unless it sets one (it was 0.01 here, so the benchmark
sampled each consumer's pairs by hash, a loop over the consumers per message no run took)."""
LEDGER = 7


def _connected(
    consumers: int,
    individual: bool,
    recorder: Recorder,
    conn_id: int = 1,
    decoder: DeliveryDecoder | None = None,
) -> Connection:
    """A driver connection past its handshake, with `consumers` ACTIVE consumers (ids 1..,
    indexes from (conn_id - 1) * consumers)."""
    ack_mode = "individual" if individual else "cumulative"
    settings = Settings(host="127.0.0.1", consumer=ConsumerConfig(ack_mode=ack_mode))
    conn = Connection(conn_id, settings, recorder, Group(), decoder=decoder)
    first = (conn_id - 1) * consumers
    protocol = conn._protocol
    protocol.send(ev.Connect("bench", 20, supports_broker_entry_metadata=True))
    protocol.receive_data(
        encode_frame(command(T.CONNECTED, server_version="bench", protocol_version=20))
    )
    assert isinstance(protocol.next_event(), ev.Connected)
    for cid in range(1, consumers + 1):
        spec = ConsumerSpec(first + cid - 1, f"c{first + cid}", TOPIC, "all", "Broadcast")
        rid = protocol.next_request_id()
        protocol.send(ev.Request(subscribe_command(spec, cid, rid)))
        protocol.receive_data(encode_frame(command(T.SUCCESS, request_id=rid)))
        # A storm's SUCCESS comes read from bytes (pulsar_protocol.client_commands).
        assert isinstance(protocol.next_event(), ev.Response | SubscribesAnswered)
        protocol.send(ev.Flow(cid, settings.consumer.receiver_queue_size))
        conn.consumers[cid] = ConsumerState(spec.index, cid, spec, TOPIC)
    protocol.data_to_send()
    return conn


def _entry_reads(
    consumers: int, entry_id: int, size: int, intended_us: int, read_size: int, shared: bool
) -> list[bytes]:
    """The bytes of one entry's MESSAGE to every consumer, as recvs of `read_size` return them.
    `shared`: each consumer in a subscription of its own (the Shared baseline), whose
    dispatcher stamps its own dispatch time, so no two frames have the same head."""
    body = stamp(bytes(size), intended_us, intended_us + 100, entry_id)
    section = encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1), body
    )
    t = intended_us + 200
    heads = []
    for cid in range(1, consumers + 1):
        dispatch_us = t + 520 + (3 * cid if shared else 0)
        bem = encode_stamps(entry_id, EntryStamps(t, t + 10, t + 500, t + 510, dispatch_us))
        heads.append(MessageTemplate(LEDGER, entry_id, len(section), bem).head(encode_varint(cid)))
    data = b"".join(head + section for head in heads)
    return [data[i : i + read_size] for i in range(0, len(data), read_size)]


def _measure(
    consumers: int,
    entries: int,
    size: int,
    read_size: int,
    individual: bool,
    profiler: cProfile.Profile | None,
    shared: bool = False,
    connections: int = 1,
    sample_fraction: float = SAMPLE_FRACTION,
) -> tuple[float, int]:
    """CPU seconds for `entries` broadcast entries, and how many ACK frames were flushed."""
    if connections > 1:
        return _measure_connections(
            consumers, entries, size, connections, profiler, sample_fraction
        )
    with tempfile.TemporaryDirectory() as directory:
        recorder = Recorder(Path(directory), sample_fraction, {})
        recorder.phases.measure_start = 0.0
        conn = _connected(consumers, individual, recorder)
        protocol = conn._protocol
        start_us = int(time.time() * 1e6)
        reads = [
            _entry_reads(consumers, n, size, start_us + n * 1_000_000, read_size, shared)
            for n in range(entries)
        ]
        acks = 0
        cpu = 0.0
        for n, chunks in enumerate(reads):
            if profiler is not None:
                profiler.enable()
            started = time.process_time()
            for i, chunk in enumerate(chunks):
                receive_us = start_us + n * 1_000_000 + 2_000 + 20 * i  # each read its own time
                conn._kernel_us = receive_us - 50
                conn._handle_data(chunk, receive_us)
            acks += protocol.flush_acks()
            protocol.data_to_send()
            cpu += time.process_time() - started
            if profiler is not None:
                profiler.disable()
        assert recorder.received == consumers * entries, recorder.received
        recorder.close()
    return cpu, acks


def _measure_connections(
    consumers: int,
    entries: int,
    size: int,
    connections: int,
    profiler: cProfile.Profile | None,
    sample_fraction: float = SAMPLE_FRACTION,
) -> tuple[float, int]:
    """`_measure` over `connections` connections of `consumers` each (1: one connection per
    consumer), each entry read on every connection in turn as one pass of the receive engine
    would (one recv each, its own read and kernel times, the pass's deliveries handed over at
    its end), then the ack flusher's turn over every connection."""
    with tempfile.TemporaryDirectory() as directory:
        recorder = Recorder(Path(directory), sample_fraction, {})
        recorder.phases.measure_start = 0.0
        decoder = DeliveryDecoder(False)
        conns = [_connected(consumers, False, recorder, n + 1, decoder) for n in range(connections)]
        deliveries = conns[0]._deliveries
        start_us = int(time.time() * 1e6)
        acks = 0
        cpu = 0.0
        for n in range(entries):
            (data,) = _entry_reads(consumers, n, size, start_us + n * 1_000_000, 1 << 30, False)
            if profiler is not None:
                profiler.enable()
            started = time.process_time()
            for i, conn in enumerate(conns):
                receive_us = start_us + n * 1_000_000 + 2_000 + 3 * i
                conn._kernel_us = receive_us - 50
                conn._read_data(data, receive_us)
            deliveries.flush()
            for conn in conns:
                acks += conn._protocol.flush_acks()
                conn._protocol.data_to_send()
            cpu += time.process_time() - started
            if profiler is not None:
                profiler.disable()
        assert recorder.received == consumers * connections * entries, recorder.received
        recorder.close()
    return cpu, acks // connections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--size", type=int, default=10_240)
    parser.add_argument("--read-size", type=int, default=RECV_SIZE, help="bytes per recv")
    parser.add_argument("--individual", action="store_true", help="individual acks")
    parser.add_argument("--profile", action="store_true", help="cProfile, top functions")
    parser.add_argument(
        "--sample-fraction",
        type=float,
        default=SAMPLE_FRACTION,
        help="the workload's stageSampleFraction (share of deliveries with a stages row)",
    )
    parser.add_argument(
        "--shared", action="store_true", help="one subscription per consumer (Shared baseline)"
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=1,
        help="connections of --consumers each, read in one pass (--consumers 1: one per consumer)",
    )
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    cpu, acks = _measure(
        args.consumers,
        args.entries,
        args.size,
        args.read_size,
        args.individual,
        profiler,
        args.shared,
        args.connections,
        args.sample_fraction,
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    deliveries = args.consumers * args.connections * args.entries
    print(
        f"{args.consumers} consumers on each of {args.connections} connection(s), "
        f"{args.entries} entries of "
        f"{args.size} B in recvs of {args.read_size} B: {1e6 * cpu / deliveries:.2f} us/delivery "
        f"(codec, driver, recorder, acks); {acks / args.entries:.0f} ACKs per entry"
    )


if __name__ == "__main__":
    main()

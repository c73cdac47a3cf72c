"""Kernel receive timestamps: the SCM_TIMESTAMPING control message to epoch µs, and the
fallback where there is none."""

from __future__ import annotations

import socket
import struct
import sys
import time

import pytest

from drivers.net import rx_timestamps
from drivers.net.rx_timestamps import SCM_TIMESTAMPING, enable, kernel_time_us


def timestamping(seconds: int, nanoseconds: int) -> tuple[int, int, bytes]:
    """What Linux puts in recvmsg's ancillary data: three timespecs, software stamp first."""
    return (socket.SOL_SOCKET, SCM_TIMESTAMPING, struct.pack("=6q", seconds, nanoseconds, *[0] * 4))


def test_the_software_stamp_becomes_epoch_microseconds():
    assert kernel_time_us([timestamping(1_763_800_000, 123_456_789)]) == 1_763_800_000_123_456


def test_other_control_messages_are_skipped():
    rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=i", 3))
    elsewhere = (socket.IPPROTO_IP, SCM_TIMESTAMPING, struct.pack("=2q", 1, 2))
    assert kernel_time_us([rights, elsewhere, timestamping(5, 1_000)]) == 5_000_001


@pytest.mark.parametrize(
    "ancillary",
    [
        [],  # no control message (a socketpair, a kernel that did not stamp)
        [(socket.SOL_SOCKET, SCM_TIMESTAMPING, b"\0" * 8)],  # truncated
        [timestamping(0, 0)],  # the software stamp left empty (hardware stamps only)
    ],
)
def test_no_kernel_time_is_zero(ancillary):
    assert kernel_time_us(ancillary) == 0


class _Refusing:
    def setsockopt(self, *args: object) -> None:
        raise OSError(92, "Protocol not available")


def test_a_refused_option_means_no_kernel_times():
    assert enable(_Refusing()) is False


def test_no_kernel_times_off_linux(monkeypatch):
    monkeypatch.setattr(rx_timestamps.sys, "platform", "darwin")
    with socket.socket() as sock:
        assert enable(sock) is False


@pytest.mark.skipif(not rx_timestamps.sys.platform.startswith("linux"), reason="Linux only")
def test_a_tcp_socket_on_linux_takes_the_option():
    with socket.socket() as sock:
        assert enable(sock) is True
        assert sock.getsockopt(socket.SOL_SOCKET, rx_timestamps.SO_TIMESTAMPING) != 0


class _Raw:
    """An OS socket whose recvmsg_into brings `ancillary` with 3 bytes."""

    def __init__(self, ancillary: list[tuple[int, int, bytes]]) -> None:
        self.ancillary = ancillary

    def recvmsg_into(self, buffers: list, ancbufsize: int) -> tuple:
        buffers[0][:3] = b"abc"
        return 3, self.ancillary, 0, None


@pytest.mark.parametrize(
    "ancillary",
    [
        [timestamping(1_763_800_000, 123_456_789)],  # the common case, read without the loop
        [(socket.SOL_SOCKET, SCM_TIMESTAMPING, b"\0" * 8)],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=i", 3))],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=i", 3)), timestamping(5, 1_000)],
        [],
    ],
)
def test_a_stamped_read_gives_the_kernel_time_of_its_control_messages(ancillary):
    room = bytearray(8)
    nbytes, _, kernel_us = rx_timestamps.read_into(_Raw(ancillary), memoryview(room), True)
    assert (nbytes, bytes(room[:3]), kernel_us) == (3, b"abc", kernel_time_us(ancillary))


def test_a_stamped_tcp_read_on_linux_has_a_kernel_time_before_its_read_time():
    if not sys.platform.startswith("linux"):
        pytest.skip("SO_TIMESTAMPING is Linux's")
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            if not enable(client):
                pytest.skip("the kernel refused SO_TIMESTAMPING")
            client.settimeout(5)
            room = bytearray(1000)
            # Linux turns stamping on a moment after the first socket asks: the first reads
            # may have no kernel time (0), a later one has.
            for _ in range(20):
                accepted.sendall(b"x" * 100)
                client.recv(1, socket.MSG_PEEK)  # wait for the bytes, leave them
                nbytes, read_us, kernel_us = rx_timestamps.read_into(client, memoryview(room), True)
                assert nbytes == 100 and kernel_us <= read_us
                if kernel_us:
                    break
                time.sleep(0.05)
    assert 0 < kernel_us <= read_us

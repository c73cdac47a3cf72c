"""`bench run` over `pulsar+ssl://` (issue 27): the native driver against the bundled broker
serving TLS only (its plain ports empty, as Pulsar's `brokerServicePort`), the admin API over
HTTPS, a token required, both trusted through `client.tlsTrustCertsFilePath`. Every delivery
keeps its kernel receive time (the raw stamped reads go through a MemoryBIO); a trust file of
another CA stops the run before any worker starts, naming the key; a certificate for another
name is refused unless hostname verification is off."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gevent
import gevent.event
import jwt
import pytest

from drivers.base import ConsumerSpec, DriverError
from drivers.pulsar.driver import PulsarDriver
from drivers.pulsar.settings import PulsarConfig
from results_contract.hlog import decode, read_intervals
from results_contract.metrics import E2E_KERNEL
from results_contract.paths import HISTOGRAMS_FILE
from tests.conftest import ROOT, free_ports
from tests.tls_certificates import certificate_authority, server_certificate, tls_only_broker

pytestmark = pytest.mark.integration

SECRET = b"a secret of the bench, 32 bytes!"


@dataclass(frozen=True)
class TlsBroker:
    port: int
    admin_port: int
    ca: Path
    log: Path


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The module's CA (an RSA key is 0.1-0.5 CPU-s to make), which signs both brokers'."""
    return certificate_authority(tmp_path_factory.mktemp("ca"))


def _start(
    tmp_path: Path, ca: tuple[Path, Path], names: str, secret: bytes | None = None
) -> Iterator[TlsBroker]:
    """The broker serving TLS only, with a certificate for `names` signed by `ca`; with
    `secret`, tokens signed with it are required."""
    cert, key = server_certificate(tmp_path, ca, names)
    port, admin_port = free_ports(2)
    log = tmp_path / "broker.log"
    with tls_only_broker(tmp_path / "data", log, cert, key, port, admin_port, secret):
        yield TlsBroker(port, admin_port, ca[0], log)


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory, ca: tuple[Path, Path]
) -> Iterator[TlsBroker]:
    """Deployed as Pulsar commonly is: TLS, and a token required. One for the module (its
    two runs use topics of their own), started once."""
    yield from _start(tmp_path_factory.mktemp("tls"), ca, "DNS:localhost,IP:127.0.0.1", SECRET)


def _driver_file(path: Path, broker: TlsBroker, trust: Path, extra: str = "") -> Path:
    path.write_text(
        textwrap.dedent(
            f"""
            name: tls
            driverClass: drivers.pulsar.driver:PulsarDriver
            client:
              serviceUrl: pulsar+ssl://localhost:{broker.port}
              adminUrl: https://localhost:{broker.admin_port}
              tlsTrustCertsFilePath: {trust}
              connectTimeoutSeconds: 5
              operationTimeoutSeconds: 5
            """
        )
        + extra
    )
    return path


def _bench_run(tmp_path: Path, driver: Path) -> subprocess.CompletedProcess[str]:
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        textwrap.dedent(
            """
            name: over tls
            messageSize: 1024
            producerRate: 20
            partitionsPerTopic: 2
            subscriptionType: Broadcast
            consumersPerTopic: 12
            consumersPerConnection: 4
            warmupDurationSeconds: 1
            testDurationSeconds: 2
            drainSeconds: 2
            """
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
        + ["--workers", "1", "--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _recorded(run_dir: Path) -> Counter[str]:
    """Values recorded per histogram tag, over every worker and interval."""
    counts: Counter[str] = Counter()
    for path in run_dir.glob(f"raw/*/{HISTOGRAMS_FILE}"):
        for interval in read_intervals(path):
            counts[interval.tag] += decode(interval.blob).get_total_count()
    return counts


def test_a_run_over_pulsar_ssl_keeps_kernel_receive_times(tmp_path, tls_broker) -> None:
    """With the token in the driver file: it travels in CONNECT and the admin calls' header,
    both inside TLS."""
    token = tmp_path / "token"
    token.write_text(jwt.encode({"sub": "bench"}, SECRET, algorithm="HS256"))
    authentication = (
        "  authentication:\n"
        "    plugin: org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        f"    data: file://{token}\n"
    )
    driver = _driver_file(tmp_path / "driver.yaml", tls_broker, tls_broker.ca, authentication)
    result = _bench_run(tmp_path, driver)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False
    assert manifest["driver"]["client"]["tlsTrustCertsFilePath"] == str(tls_broker.ca)
    totals = manifest["worker_totals"]["w0"]
    assert totals["sent"] > 0 and totals["received"] == totals["sent"] * 12
    # Every delivery timed at the kernel as well as at the read: the TLS reads kept the stamps.
    counts = _recorded(run_dir)
    assert counts["e2e"] > 0, counts
    assert counts[E2E_KERNEL] == counts["e2e"], counts
    # The partitioned topic was made, and its stats read, over HTTPS with the trust file; so
    # were the broker's version, its clock and its process metrics.
    stats = json.loads((run_dir / "broker" / "topic-stats.json").read_text())
    assert len(stats) == 2 and all(s is not None and s["msgInCounter"] > 0 for s in stats.values())
    assert manifest["broker"]["version"] and manifest["broker_clock"]["how"] == "measured"
    assert len((run_dir / "broker" / "process.csv").read_text().splitlines()) > 1


def test_a_trust_file_of_another_ca_stops_the_run_naming_the_key(tmp_path, tls_broker) -> None:
    other_ca, _ = certificate_authority(tmp_path, "other-ca")
    driver = _driver_file(tmp_path / "driver.yaml", tls_broker, other_ca)
    result = _bench_run(tmp_path, driver)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "certificate verify failed" in result.stderr, result.stderr[-3000:]
    assert f"client.tlsTrustCertsFilePath ({other_ca})" in result.stderr
    assert not list((tmp_path / "results").glob("*/raw/*/timeline.csv"))  # no worker ran


@pytest.fixture
def misnamed_broker(tmp_path: Path, ca: tuple[Path, Path]) -> Iterator[TlsBroker]:
    """TLS with a certificate for another host than the one dialled (localhost)."""
    yield from _start(tmp_path, ca, "DNS:broker.example")


class _Kernel:
    """The kernel receive time of each delivery."""

    def __init__(self) -> None:
        self.times: list[int] = []

    def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
        self.times.append(kernel_us)

    def messages_received(self, indexes, payload, receive_us, stamps, kernel_us) -> None:
        self.times += [kernel_us] * len(indexes)


def _round_trip(config: PulsarConfig, port: int, host: str = "localhost") -> tuple[str, list[int]]:
    """One consumer and one message through the native driver: (the subscribe's error, ""
    when it subscribed; the deliveries' kernel receive times)."""
    got = _Kernel()
    driver = PulsarDriver()
    driver.initialize(
        config, got, consumers_per_connection=1, service_url=f"pulsar+ssl://{host}:{port}"
    )
    topic = "persistent://public/default/named"
    try:
        spec = ConsumerSpec(0, "c0", topic, "s", "Exclusive")
        result = gevent.spawn(driver.subscribe, spec).get(timeout=20)
        if not result.ok:
            return result.error, []
        producer = gevent.spawn(driver.create_producer, topic).get(timeout=20)
        sent: gevent.event.AsyncResult[Exception | None] = gevent.event.AsyncResult()
        producer.send_async(None, b"over tls", sent.set)
        assert sent.get(timeout=10) is None
        deadline = time.monotonic() + 10
        while not got.times and time.monotonic() < deadline:
            gevent.sleep(0.02)
        return "", got.times
    finally:
        driver.close()


def test_a_certificate_for_another_name_is_refused_unless_verification_is_off(
    tmp_path, misnamed_broker
) -> None:
    client = {"serviceUrl": f"pulsar+ssl://localhost:{misnamed_broker.port}"}
    trusted = {**client, "tlsTrustCertsFilePath": str(misnamed_broker.ca)}
    error, _ = _round_trip(PulsarConfig.parse({"client": trusted}, ""), misnamed_broker.port)
    assert "Hostname mismatch" in error, error
    assert "client.tlsEnableHostnameVerification" in error
    unchecked = {**trusted, "tlsEnableHostnameVerification": False}
    error, kernel_times = _round_trip(
        PulsarConfig.parse({"client": unchecked}, ""), misnamed_broker.port
    )
    assert error == ""
    # Delivered once, with the kernel's receive time of the read that completed its record.
    assert len(kernel_times) == 1 and kernel_times[0] > 0, kernel_times


def test_pulsar_ssl_to_a_plain_port_says_so(broker) -> None:
    """The bundled broker's plain port, dialled as pulsar+ssl://: the coordinator's check and
    a worker's connection both say the port may not be a TLS one."""
    url = f"pulsar+ssl://127.0.0.1:{broker.port}"
    config = PulsarConfig.parse({"client": {"serviceUrl": url}}, "")
    driver = PulsarDriver()
    driver.parse_config({"client": {"serviceUrl": url}}, "")
    with pytest.raises(DriverError, match=r"failed: .*brokerServicePortTls"):
        driver.check_reachable(url, 5)
    error, _ = _round_trip(config, broker.port, host="127.0.0.1")
    assert "TLS handshake with 127.0.0.1" in error and "brokerServicePortTls" in error, error

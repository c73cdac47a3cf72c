"""Driver files: shipped files, defaults, the broker pass-through, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.config_errors import ConfigError
from harness.driver_config import (
    DEFAULT_DRIVER_CLASS,
    ClientConfig,
    ConsumerConfig,
    DriverConfig,
    ProducerConfig,
    load_driver,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "drivers").glob("*.yaml"))


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drivers").mkdir()

    def write(text: str) -> str:
        Path("drivers/x.yaml").write_text(text, encoding="utf-8")
        return "drivers/x.yaml"

    return write


def test_default_is_the_bundled_broker():
    config = load_driver(None)
    assert config == DriverConfig(name="bundled")
    assert config.uses_bundled_broker
    assert config.driver_class == DEFAULT_DRIVER_CLASS == "drivers.pulsar.driver:PulsarDriver"
    assert config.client == ClientConfig(
        service_url=None,
        admin_url=None,
        source_addresses=0,
        connect_timeout_seconds=10,
        operation_timeout_seconds=30,
    )
    assert config.producer == ProducerConfig(
        batching_enabled=False,
        batching_max_publish_delay_ms=1,
        max_pending_messages=1000,
        send_timeout_ms=30000,
    )
    assert config.consumer == ConsumerConfig(
        receiver_queue_size=1000, ack_group_time_ms=100, ack_mode="cumulative"
    )
    assert dict(config.broker) == {}


def test_bundled_yaml_spells_out_the_default():
    assert load_driver(ROOT / "drivers" / "bundled.yaml") == load_driver(None)


def test_remote_example():
    config = load_driver(ROOT / "drivers" / "pulsar-remote.yaml")
    assert not config.uses_bundled_broker
    assert config.client.service_url == "pulsar://127.0.0.1:6650"
    assert config.client.admin_url == "http://127.0.0.1:8080"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_to_dict_loads_back_equal(path, tmp_path):
    config = load_driver(path)
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    assert load_driver(copy) == config


def test_sections_and_broker_settings(write):
    config = load_driver(
        write(
            "name: tuned\n"
            "producer: {batchingEnabled: true, sendTimeoutMs: 0}\n"
            "consumer: {ackMode: Individual, receiverQueueSize: 10}\n"
            "client:\n"
            "broker:\n  journalSyncData: false\n  listenBacklog: 4096\n  dataDir: /tmp/b\n"
        )
    )
    assert (config.producer.batching_enabled, config.producer.send_timeout_ms) == (True, 0)
    assert (config.consumer.ack_mode, config.consumer.receiver_queue_size) == ("individual", 10)
    assert config.client == ClientConfig()
    assert dict(config.broker) == {
        "journalSyncData": False,
        "listenBacklog": 4096,
        "dataDir": "/tmp/b",
    }
    with pytest.raises(TypeError):
        config.broker["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    "url",
    [
        "pulsar://localhost:6650",
        "pulsar://127.0.0.2:6650",
        "pulsar://[::1]:6650",
        "pulsar://127.0.0.1:6650,127.0.0.1:6651",
    ],
)
def test_source_addresses_with_a_loopback_broker(write, url):
    config = load_driver(write(f"name: r\nclient: {{serviceUrl: '{url}', sourceAddresses: 8}}\n"))
    assert config.client.source_addresses == 8


ERRORS = [
    ("client: {}\n", "missing key 'name' (every driver file needs a name)"),
    ("name: d\nproducers: {}\n", "unknown key 'producers' (did you mean 'producer'?)"),
    (
        "name: d\nclient: {serviceURL: 'pulsar://h:6650'}\n",
        "unknown key 'client.serviceURL' (did you mean 'client.serviceUrl'?)",
    ),
    (
        "name: d\nclient: {ioThreads: 16}\n",
        "unknown key 'client.ioThreads' (see docs/workloads.md)",
    ),
    (
        "name: d\nclient: {serviceUrl: 'http://h:8080'}\n",
        "key 'client.serviceUrl': expected a pulsar:// or pulsar+ssl:// URL, got 'http://h:8080'",
    ),
    (
        "name: d\nclient: {adminUrl: 'http://h:8080'}\n",
        "key 'client.adminUrl' needs 'client.serviceUrl' (the bundled broker's admin API is "
        "started by the harness; drop adminUrl or give serviceUrl)",
    ),
    (
        "name: d\nclient: {serviceUrl: 'pulsar://10.0.0.5:6650', sourceAddresses: 4}\n",
        "key 'client.sourceAddresses': 127.x.y.z source addresses only reach a loopback "
        "broker, and serviceUrl is 'pulsar://10.0.0.5:6650' (set it to 0, or use a loopback "
        "serviceUrl)",
    ),
    (
        "name: d\nclient: {sourceAddresses: -1}\n",
        "key 'client.sourceAddresses': must not be negative, got -1",
    ),
    (
        "name: d\nproducer: {maxPendingMessages: true}\n",
        "key 'producer.maxPendingMessages': expected an integer, got true",
    ),
    (
        "name: d\nproducer: {batchingEnabled: 1}\n",
        "key 'producer.batchingEnabled': expected true or false, got 1",
    ),
    (
        "name: d\nconsumer: {ackMode: cumulativ}\n",
        "key 'consumer.ackMode': expected one of cumulative, individual, got 'cumulativ' "
        "(did you mean 'cumulative'?)",
    ),
    ("name: d\nconsumer: [1]\n", "key 'consumer': expected a mapping, got a list"),
    (
        "name: d\ndriverClass: drivers.pulsar.driver.PulsarDriver\n",
        "key 'driverClass': expected 'package.module:Class', got "
        "'drivers.pulsar.driver.PulsarDriver' (e.g. 'drivers.pulsar.driver:PulsarDriver')",
    ),
    ("name: d\nbroker: 3\n", "key 'broker': expected a mapping, got 3"),
    (
        "name: d\nbroker: {cache: {sizeMB: 10}}\n",
        "key 'broker.cache': expected a string, number, boolean or null, got a mapping "
        "(broker settings are flat)",
    ),
    ("name: d\nbroker: {1: x}\n", "key 'broker': setting 1 is not a string (quote it)"),
    ("name: [a]\n", "key 'name': expected a string, got a list"),
    ("- name: d\n", "the top level is a list, expected a mapping of keys (see docs/workloads.md)"),
    (
        "name: d\nname: e\n",
        "line 2, column 1: duplicate key 'name' (keep one; to sweep a key, "
        "give it a list of values)",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_error_message(write, text, message):
    path = write(text)
    with pytest.raises(ConfigError) as exc:
        load_driver(path)
    assert str(exc.value) == f"{path}: {message}"
    assert "\n" not in str(exc.value)


def test_missing_file(write):
    with pytest.raises(ConfigError) as exc:
        load_driver("drivers/missing.yaml")
    assert str(exc.value) == "drivers/missing.yaml: no such file"

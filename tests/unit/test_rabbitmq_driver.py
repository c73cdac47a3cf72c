"""The RabbitMQ driver's settings and mapping, without a broker: the shipped file (every key
with its default), unknown keys and bad values named, what each subscription type declares
and consumes, the one-line refusals of a login, and the launcher's version and missing-program
messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pamqp import commands

from drivers.base import ConsumerSpec, DriverError
from drivers.config import ConfigError
from drivers.rabbitmq import server
from drivers.rabbitmq.connection import Login
from drivers.rabbitmq.driver import (
    ConsumerConfig,
    RabbitMqConfig,
    RabbitMqDriver,
    _refusal,
    queue_methods,
)
from drivers.rabbitmq.protocol import ConnectionClosed
from harness.driver_config import load_driver_file
from harness.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
W = "f.yaml: "


def test_the_shipped_file_has_every_key_with_its_default_and_round_trips() -> None:
    driver_file = load_driver_file(ROOT / "drivers" / "rabbitmq.yaml")
    assert isinstance(driver_file.driver, RabbitMqDriver)
    assert driver_file.config == RabbitMqConfig()  # the file spells out the defaults
    shipped = yaml.safe_load((ROOT / "drivers" / "rabbitmq.yaml").read_text())
    resolved = driver_file.to_dict()
    for section in ("client", "producer", "consumer", "stream"):
        assert shipped[section] == resolved[section], section
    assert driver_file.embedded is not None and driver_file.config.service_url is None
    assert driver_file.embedded.start_timeout_s == 60
    assert driver_file.mode_problem("Key_Shared") is not None
    assert driver_file.mode_problem("Broadcast") is driver_file.mode_problem("Shared") is None


@pytest.mark.parametrize(
    "sections, match",
    [
        ({"client": {"virtualhost": "/"}}, r"unknown key 'client.virtualhost'.*virtualHost"),
        ({"streams": {}}, "unknown key 'streams'"),
        ({"consumer": {"queueType": "stream"}}, "consumer.queueType"),
        ({"client": {"serviceUrl": "nats://127.0.0.1:1"}}, "client.serviceUrl"),
        ({"consumer": {"prefetchCount": 0}}, "consumer.prefetchCount"),
        ({"consumer": {"ackEvery": 0}}, "consumer.ackEvery"),
        ({"consumer": {"prefetchCount": 10, "ackEvery": 11}}, r"consumer.ackEvery is 11.*10"),
        ({"producer": {"persistent": "yes"}}, "producer.persistent"),
    ],
)
def test_a_bad_key_or_value_is_named(sections, match) -> None:
    with pytest.raises(ConfigError, match=match):
        RabbitMqConfig.parse(sections, W)


def test_partitions_and_key_shared_and_ack_holes_are_refused_saying_why() -> None:
    assert "set it to 1" in (RabbitMqConfig().partitions_problem(2) or "")
    assert RabbitMqConfig().partitions_problem(1) is None
    driver = RabbitMqDriver()
    with pytest.raises(DriverError, match="Key_Shared: RabbitMQ routes by key"):
        driver.subscribe(ConsumerSpec(0, "c0", "t", "s", "Key_Shared"))
    with pytest.raises(DriverError, match="ackHoles"):
        driver.subscribe(ConsumerSpec(0, "c0", "t", "s", "Shared", ack_skip_every=3))


def _declared(spec: ConsumerSpec, config: RabbitMqConfig) -> tuple:
    exchange, queue, bind, qos, consume = queue_methods(spec, config)
    assert isinstance(exchange, commands.Exchange.Declare)
    assert (exchange.exchange, exchange.exchange_type, exchange.durable) == ("t", "fanout", True)
    assert isinstance(queue, commands.Queue.Declare) and queue.durable
    assert isinstance(bind, commands.Queue.Bind) and (bind.queue, bind.exchange) == ("t.s", "t")
    assert isinstance(qos, commands.Basic.Qos) and qos.prefetch_count == 100
    assert isinstance(consume, commands.Basic.Consume) and consume.queue == "t.s"
    assert not consume.no_ack
    return queue.arguments, consume.arguments, consume.exclusive


def test_broadcast_is_a_stream_read_from_next() -> None:
    queue, consume, exclusive = _declared(
        ConsumerSpec(0, "c0", "t", "s", "Broadcast"), RabbitMqConfig()
    )
    assert queue == {
        "x-queue-type": "stream",
        "x-max-length-bytes": 1_000_000_000,
        "x-stream-max-segment-size-bytes": 500_000_000,
    }
    assert consume == {"x-stream-offset": "next"} and not exclusive


@pytest.mark.parametrize(
    "kind, queue_type, queue_args, exclusive",
    [
        ("Shared", "classic", {}, False),
        ("Shared", "quorum", {}, False),
        ("Exclusive", "classic", {}, True),
        ("Failover", "classic", {"x-single-active-consumer": True}, False),
    ],
)
def test_the_other_types_are_a_queue_per_subscription(kind, queue_type, queue_args, exclusive):
    config = RabbitMqConfig(consumer=ConsumerConfig(queue_type=queue_type))
    queue, consume, excl = _declared(ConsumerSpec(0, "c0", "t", "s", kind), config)
    assert queue == {"x-queue-type": queue_type, "x-expires": 300_000, **queue_args}
    assert consume == {} and excl is exclusive


@pytest.mark.parametrize(
    "stage, closed, key",
    [
        ("login", ConnectionClosed(403, "ACCESS_REFUSED - Login was refused", 0, 0), "username"),
        ("login", None, "client.username / client.password"),
        (
            "open",
            ConnectionClosed(530, "NOT_ALLOWED - vhost nope not found", 10, 40),
            "virtualHost",
        ),
        ("open", None, "client.virtualHost"),
    ],
)
def test_a_refused_login_is_one_line_naming_the_key(stage, closed, key) -> None:
    message = _refusal("RabbitMQ at amqp://h:1", stage, closed, Login(virtual_host="nope"))
    assert key in message and "\n" not in message
    assert message.startswith("client.")


def test_the_launcher_reads_the_version_from_the_install_folder(tmp_path) -> None:
    script = tmp_path / "rabbitmq_server-3.10.8" / "sbin" / "rabbitmq-server"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    assert server.version(str(script)) == "RabbitMQ 3.10.8"
    assert "version unknown" in server.version(str(tmp_path / "rabbitmq-server"))


def test_the_launcher_without_rabbitmq_names_the_package(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(server, "SCRIPTS", (str(tmp_path / "none"),))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="apt-get install rabbitmq-server"):
        server.rabbitmq_script(None)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "tests/data/omb").glob("*.yaml")))
def test_omb_workload_files_run_unchanged_or_are_refused_naming_the_key(name) -> None:
    """As OMB's own RabbitMQ driver: one-partition files pass the checks a run makes before
    it starts (harness/run_command.py, _checked_driver); a partitioned topic is refused there,
    its message saying why."""
    cases = load_workload(ROOT / "tests/data/omb" / name).cases
    driver = load_driver_file(ROOT / "drivers/rabbitmq.yaml")
    assert all(driver.mode_problem(case.subscription_type) is None for case in cases)
    assert isinstance(driver.config, RabbitMqConfig)
    assert all(case.message_size <= driver.config.max_message_size for case in cases)
    partitions = max(case.partitions_per_topic for case in cases)
    problem = driver.config.partitions_problem(partitions)
    if partitions == 1:
        assert problem is None
    else:
        assert problem is not None and "no partitions" in problem

"""Driver files: the harness's keys (name, driverClass, broker), the sections each driver
parses itself (the native driver's client/producer/consumer, the test double's delay), the
shipped files, and the errors."""

from __future__ import annotations

from pathlib import Path

import msgpack  # type: ignore[import-untyped]  # no stubs for the pinned version
import pytest
import yaml

from drivers.base import load_driver
from drivers.config import ConfigError
from drivers.pulsar.settings import ClientConfig, ConsumerConfig, ProducerConfig, PulsarConfig
from harness.driver_config import DEFAULT_DRIVER_CLASS, DriverFile, load_driver_file
from harness.messages import RunConfig
from harness.run_plan import RunPlan
from harness.workload import Workload
from tests.doubles.delay_driver import DelayConfig, DelayDriver
from tests.peers import PROGRAMS, program

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "drivers").glob("*.yaml"))
DOUBLE = "tests.doubles.delay_driver:DelayDriver"


def pulsar(driver: DriverFile) -> PulsarConfig:
    """The native driver's own config, as it parsed it."""
    assert isinstance(driver.config, PulsarConfig)
    return driver.config


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drivers").mkdir()

    def write(text: str) -> str:
        Path("drivers/x.yaml").write_text(text, encoding="utf-8")
        return "drivers/x.yaml"

    return write


def test_default_is_the_native_driver_on_the_bundled_broker():
    driver = load_driver_file(None)
    assert (driver.name, driver.driver_class) == ("bundled", DEFAULT_DRIVER_CLASS)
    assert driver.driver_class == "drivers.pulsar.driver:PulsarDriver"
    assert driver.uses_bundled_broker
    assert driver.config == PulsarConfig()
    assert pulsar(driver).client == ClientConfig(
        service_url=None,
        admin_url=None,
        source_addresses=0,
        connect_timeout_seconds=10,
        operation_timeout_seconds=30,
    )
    assert pulsar(driver).producer == ProducerConfig(
        batching_enabled=False,
        batching_max_publish_delay_ms=1,
        max_pending_messages=1000,
        send_timeout_ms=30000,
    )
    assert pulsar(driver).consumer == ConsumerConfig(
        receiver_queue_size=1000, ack_group_time_ms=100, ack_mode="cumulative"
    )
    assert dict(driver.broker) == {}


def test_bundled_yaml_spells_out_the_default():
    assert load_driver_file(ROOT / "drivers" / "bundled.yaml") == load_driver_file(None)


def test_remote_example():
    driver = load_driver_file(ROOT / "drivers" / "pulsar-remote.yaml")
    assert not driver.uses_bundled_broker
    assert driver.config.service_url == "pulsar://127.0.0.1:6650"
    assert driver.config.admin_url == "http://127.0.0.1:8080"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_to_dict_loads_back_equal(path, tmp_path):
    if path.stem in PROGRAMS:
        program(path.stem)  # a peer's file names its server program: skips when it is absent
    driver = load_driver_file(path)
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump(driver.to_dict(), sort_keys=False))
    assert load_driver_file(copy) == driver


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_parsed_config_reaches_the_workers_equal(path):
    """Workers get the coordinator's parsed config itself (pickled in the plan)."""
    if path.stem in PROGRAMS:
        program(path.stem)
    driver = load_driver_file(path)
    plan = RunPlan.make("r1", Workload(name="t", message_size=1, producer_rate=1), driver)
    assert RunPlan.from_dict(plan.to_dict()).driver_config == driver.config


def test_the_manifest_keys_stay_those_of_the_yaml():
    assert list(load_driver_file(None).to_dict()) == [
        "name",
        "driverClass",
        "client",
        "producer",
        "consumer",
        "broker",
    ]


def test_sections_and_broker_settings(write):
    driver = load_driver_file(
        write(
            "name: tuned\n"
            "producer: {batchingEnabled: true, sendTimeoutMs: 0}\n"
            "consumer: {ackMode: Individual, receiverQueueSize: 10}\n"
            "client:\n"
            "broker:\n  journalSyncData: false\n  listenBacklog: 4096\n  dataDir: /tmp/b\n"
        )
    )
    config = pulsar(driver)
    assert (config.producer.batching_enabled, config.producer.send_timeout_ms) == (True, 0)
    assert (config.consumer.ack_mode, config.consumer.receiver_queue_size) == ("individual", 10)
    assert config.client == ClientConfig()
    assert dict(driver.broker) == {
        "journalSyncData": False,
        "listenBacklog": 4096,
        "dataDir": "/tmp/b",
    }
    with pytest.raises(TypeError):
        driver.broker["x"] = 1  # type: ignore[index]


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
    driver = load_driver_file(
        write(f"name: r\nclient: {{serviceUrl: '{url}', sourceAddresses: 8}}\n")
    )
    assert pulsar(driver).client.source_addresses == 8


def test_partitioned_topics_need_an_admin_api_unless_the_broker_is_bundled(write):
    assert PulsarConfig().partitions_problem(3) is None
    remote = load_driver_file(write("name: r\nclient: {serviceUrl: 'pulsar://h:6650'}\n"))
    assert remote.config.partitions_problem(1) is None
    assert remote.config.partitions_problem(3) == (
        "needs the broker's admin API to create partitioned topics; set client.adminUrl"
    )


def test_the_native_driver_names_topics_and_the_harness_does_not():
    driver = load_driver_file(None)
    plan = RunPlan.make("r1", Workload(name="t", message_size=1, producer_rate=1), driver)
    assert plan.topics == ("persistent://public/default/fanout-r1-0",)
    w = Workload(
        name="t", message_size=1, producer_rate=1, topics=2, topic_persistence="non-persistent"
    )
    assert RunPlan.make("r2", w, driver).topics == (
        "non-persistent://public/default/fanout-r2-0",
        "non-persistent://public/default/fanout-r2-1",
    )


ERRORS = [
    # the harness's keys
    ("client: {}\n", "missing key 'name' (every driver file needs a name)"),
    ("name: [a]\n", "key 'name': expected a string, got a list"),
    (
        "name: d\ndriverClass: drivers.pulsar.driver.PulsarDriver\n",
        "key 'driverClass': expected 'package.module:Class', got "
        "'drivers.pulsar.driver.PulsarDriver' (e.g. 'drivers.pulsar.driver:PulsarDriver')",
    ),
    (
        "name: d\ndriverClass: drivers.pulsar.driver:NoSuchDriver\n",
        "key 'driverClass': cannot load driver class 'drivers.pulsar.driver:NoSuchDriver': "
        "module 'drivers.pulsar.driver' has no attribute 'NoSuchDriver'",
    ),
    ("name: d\nbroker: 3\n", "key 'broker': expected a mapping, got 3"),
    (
        "name: d\nbroker: {cache: {sizeMB: 10}}\n",
        "key 'broker.cache': expected a string, number, boolean or null, got a mapping "
        "(broker settings are flat)",
    ),
    ("name: d\nbroker: {1: x}\n", "key 'broker': setting 1 is not a string (quote it)"),
    ("- name: d\n", "the top level is a list, expected a mapping of keys (see docs/workloads.md)"),
    (
        "name: d\nname: e\n",
        "line 2, column 1: duplicate key 'name' (keep one; to sweep a key, "
        "give it a list of values)",
    ),
    # the native driver's sections, checked by the driver
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
    ("name: d\n7: {}\n", "key 7 is not a string (keys are names; see docs/workloads.md)"),
    # the test double's section, checked by the double
    (
        f"name: d\ndriverClass: {DOUBLE}\ndelay: {{delayMs: 5, lagMS: 1}}\n",
        "unknown key 'delay.lagMS' (did you mean 'delay.lagMs'?)",
    ),
    (
        f"name: d\ndriverClass: {DOUBLE}\nclient: {{serviceUrl: 'pulsar://h:1'}}\n",
        "unknown key 'client' (see docs/workloads.md)",
    ),
    (
        f"name: d\ndriverClass: {DOUBLE}\ndelay: {{delayMs: -5}}\n",
        "key 'delay.delayMs': must not be negative, got -5",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_error_message(write, text, message):
    path = write(text)
    with pytest.raises(ConfigError) as exc:
        load_driver_file(path)
    assert str(exc.value) == f"{path}: {message}"
    assert "\n" not in str(exc.value)


def test_missing_file(write):
    with pytest.raises(ConfigError) as exc:
        load_driver_file("drivers/missing.yaml")
    assert str(exc.value) == "drivers/missing.yaml: no such file"


# A second driver gets keys of its own without a change in the harness.


def _double_file(write, section: str) -> DriverFile:
    return load_driver_file(write(f"name: double\ndriverClass: {DOUBLE}\n{section}"))


def test_the_doubles_own_section_is_accepted_and_reaches_a_workers_double(write):
    driver = _double_file(write, "delay:\n  delayMs: 40\n  lagMs: 150\n")
    assert driver.config == DelayConfig(delay_ms=40, lag_ms=150)
    assert not driver.uses_bundled_broker  # the double needs no broker
    assert driver.to_dict() == {
        "name": "double",
        "driverClass": DOUBLE,
        "delay": {"delayMs": 40, "lagMs": 150},
        "broker": {},
    }
    # As a worker gets it: in the run's plan, through Locust's msgpack transport.
    plan = RunPlan.make("r1", Workload(name="t", message_size=1, producer_rate=1), driver)
    config = RunConfig(plan, "w0", 0, 1, "/tmp/raw", "host", 0, None)
    # Locust's framing (locust.rpc.protocol.Message), without importing Locust here: it
    # monkey-patches the whole test process with gevent.
    wire = msgpack.dumps((RunConfig.NAME, config.to_dict(), "node"))
    _, data, _ = msgpack.loads(wire, raw=False, strict_map_key=False)
    received = RunConfig.from_dict(data)
    assert received == config
    worker_driver = load_driver(received.plan.driver_class)
    assert isinstance(worker_driver, DelayDriver)
    parsed = received.plan.driver_config  # as the coordinator parsed it: not parsed again
    assert isinstance(parsed, DelayConfig)
    worker_driver.initialize(
        parsed,
        callback=None,  # type: ignore[arg-type]
        consumers_per_connection=1,
        service_url=received.plan.service_url,
    )
    assert worker_driver.config == DelayConfig(delay_ms=40, lag_ms=150)


def test_the_double_falls_back_to_its_own_defaults(write):
    assert _double_file(write, "").config == DelayConfig(delay_ms=50, lag_ms=0)


def test_a_worker_gets_the_token_the_coordinator_read_and_reads_no_file(write, tmp_path):
    """The token is read once, when the coordinator loads the driver file: the plan carries
    the parsed config to the workers, so a worker (maybe on a host without the file) never
    opens it, while the manifest keeps the file's name, not the token."""
    from drivers.pulsar.settings import settings_from

    token_file = tmp_path / "token"
    token_file.write_text("read.on.the.coordinator\n")
    driver = load_driver_file(
        write(
            "name: t\nclient:\n  authentication:\n    plugin: token\n"
            f"    data: file://{token_file}\n"
        )
    )
    token_file.unlink()
    plan = RunPlan.make("r1", Workload(name="t", message_size=1, producer_rate=1), driver)
    wire = msgpack.dumps(RunConfig(plan, "w0", 0, 1, "/tmp/raw", "h", 0, None).to_dict())
    received = RunConfig.from_dict(msgpack.loads(wire, raw=False, strict_map_key=False))
    config = received.plan.driver_config
    assert isinstance(config, PulsarConfig)
    settings = settings_from(config, consumers_per_connection=1, service_url="pulsar://h:1")
    assert (settings.auth_method_name, settings.auth_data) == ("token", b"read.on.the.coordinator")
    assert "read.on.the.coordinator" not in str(driver.to_dict())

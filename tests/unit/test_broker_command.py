"""A driver file's `embeddedBroker`: the program the harness starts in place of the bundled
broker, how it is found, filled in, versioned and refused; and the shipped pulsar-lite file."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from drivers.config import ConfigError
from harness.broker_command import BrokerCommand, parse_broker_command
from harness.driver_config import load_driver_file
from harness.embedded_broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
WHERE = "x.yaml: "


def test_the_shipped_pulsar_lite_file_starts_the_wheels_binary():
    driver = load_driver_file(ROOT / "drivers/pulsar-lite.yaml")
    assert driver.uses_bundled_broker  # the harness starts the broker...
    command = driver.embedded
    assert command is not None  # ...and it is pulsar-lite, not the bundled one
    path = Path(command.resolve_executable())
    assert path.name == "pulsar-lite" and path.parent.name == "bin"
    assert command.version() == version("pulsar-lite")
    assert driver.mode_problem("Shared") is None
    assert driver.mode_problem("Broadcast") == (
        "pulsar-lite has no Broadcast subscription (it has Exclusive, Failover, Shared, "
        "Key_Shared; drop Broadcast from the workload for this driver)"
    )
    # The manifest's copy of the file loads back the same.
    assert parse_broker_command(driver.to_dict()["embeddedBroker"], WHERE) == command


def test_placeholders_are_filled_with_the_ports_and_folder_the_harness_picked(tmp_path):
    command = BrokerCommand(
        name="echo",
        executable=Path(sys.executable).name,
        args=("--addr", "{host}:{port}", "--admin", "{adminPort}", "--dir", "{dataDir}"),
        service_url="nats://{host}:{port}",
        admin_url="http://{host}:{adminPort}",
    )
    broker = EmbeddedBroker(tmp_path / "data", tmp_path, tmp_path / "log", command=command)
    argv = broker._argv()
    assert Path(argv[0]).name == Path(sys.executable).name
    assert argv[1:] == [
        "--addr",
        f"127.0.0.1:{broker.port}",
        "--admin",
        str(broker.admin_port),
        "--dir",
        str(tmp_path / "data"),
    ]
    assert broker.service_url == f"nats://127.0.0.1:{broker.port}"
    assert broker.admin_url == f"http://127.0.0.1:{broker.admin_port}"
    assert broker.name == "echo"


def test_version_from_the_programs_own_output():
    command = BrokerCommand(
        name="py", executable=Path(sys.executable).name, version_args=("--version",)
    )
    assert command.version() == f"Python {sys.version.split()[0]}"


def test_the_bundled_broker_is_named_and_versioned_as_the_project(tmp_path):
    broker = EmbeddedBroker(tmp_path / "data", tmp_path, tmp_path / "log")
    assert broker.name == "bundled"
    assert broker.version() == version("fanout-bench")
    assert broker.service_url.startswith("pulsar://127.0.0.1:")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("[]", "key 'embeddedBroker': expected a mapping, got a list"),
        ("{executable: x}", "missing key 'embeddedBroker.name' (see docs/workloads.md)"),
        (
            "{name: x, executable: x, argz: []}",
            "unknown key 'embeddedBroker.argz' (did you mean 'embeddedBroker.args'?)",
        ),
        (
            "{name: x, executable: x, args: ['{prot}']}",
            "key 'embeddedBroker.args': '{prot}' names an unknown placeholder 'prot' (known: "
            "{host}, {port}, {adminPort}, {dataDir})",
        ),
        (
            "{name: x, executable: x, subscriptionTypes: [Shard]}",
            "key 'embeddedBroker.subscriptionTypes': expected one of Exclusive, Failover, "
            "Shared, Key_Shared, Broadcast, got 'Shard' (did you mean 'Shared'?)",
        ),
    ],
)
def test_section_errors(tmp_path, section, message):
    path = tmp_path / "x.yaml"
    path.write_text(f"name: x\nembeddedBroker: {section}\n")
    with pytest.raises(ConfigError) as exc:
        load_driver_file(path)
    assert str(exc.value) == f"{path}: {message}"


def test_a_missing_program_fails_when_the_file_is_read(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(
        "name: x\nembeddedBroker: {name: ghost, executable: no-such-broker-program, "
        "versionPackage: no-such-package}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_driver_file(path)
    assert str(exc.value) == (
        "embedded broker 'ghost': no program 'no-such-broker-program' (install it: pip "
        "install no-such-package)"
    )


def test_bundled_broker_settings_beside_another_program_are_refused(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(
        f"name: x\nbroker: {{journalSyncData: false}}\n"
        f"embeddedBroker: {{name: py, executable: {sys.executable}}}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_driver_file(path)
    assert str(exc.value) == (
        f"{path}: key 'broker': settings of the bundled broker, but 'embeddedBroker' starts "
        "'py' instead (give its settings in embeddedBroker.args)"
    )

"""The native driver's token authentication: `client.authentication` as OMB's Pulsar driver
file writes it, checked and read at parse time (once: workers get the parsed config), carried
in CONNECT by the codec; the resolved config keeps a token file as a file reference."""

from __future__ import annotations

import pytest

from drivers.config import ConfigError
from drivers.pulsar.settings import PulsarConfig, settings_from
from pulsar_protocol import events as ev
from pulsar_protocol.connection import Connection
from pulsar_protocol.state import CLIENT, SERVER

PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
URL = "pulsar://127.0.0.1:6650"


def _parse(authentication: object) -> PulsarConfig:
    return PulsarConfig.parse({"client": {"authentication": authentication}}, "d.yaml: ")


@pytest.mark.parametrize(
    "data",
    ["token:abc.def.ghi", '{"token": "abc.def.ghi"}', "abc.def.ghi", "  token:abc.def.ghi\n"],
)
def test_the_forms_of_authentication_token_configure_give_the_token(data: str) -> None:
    config = _parse({"plugin": PLUGIN, "data": data})
    assert config.admin_token() == "abc.def.ghi"
    settings = settings_from(config, consumers_per_connection=1, service_url=URL)
    assert (settings.auth_method_name, settings.auth_data) == ("token", b"abc.def.ghi")


@pytest.mark.parametrize("data", ["token:abc.def.ghi", '{"token": "abc.def.ghi"}', "abc.def.ghi"])
def test_a_token_written_inline_is_left_out_of_the_resolved_config(data: str) -> None:
    """What the manifest holds (issue 41): the token given inline is `<redacted>` there."""
    config = _parse({"plugin": PLUGIN, "data": data})
    assert config.to_dict()["client"]["authentication"] == {"plugin": PLUGIN, "data": "<redacted>"}
    assert "abc.def.ghi" not in repr(config.to_dict())
    assert config.admin_token() == "abc.def.ghi"  # the run itself still has it


def test_a_token_file_is_read_once_at_parse_time_and_kept_a_reference(tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from.a.file\n")
    config = _parse({"plugin": "token", "data": f"file://{token_file}"})
    resolved = config.to_dict()
    assert resolved["client"]["authentication"] == {
        "plugin": "token",
        "data": f"file://{token_file}",
    }
    assert "from.a.file" not in repr(config)  # logs show configs; the token stays out
    token_file.write_text("rotated.token.here")  # read once: the run keeps what it parsed
    settings = settings_from(config, consumers_per_connection=1, service_url=URL)
    assert settings.auth_data == b"from.a.file"
    assert config.admin_token() == "from.a.file"
    token_file.unlink()  # and never reads the file again
    assert settings_from(config, consumers_per_connection=1, service_url=URL) == settings


def test_no_plugin_means_no_authentication() -> None:
    for value in (None, {"plugin": None, "data": None}, {"plugin": "", "data": ""}):
        config = _parse(value)
        assert config.admin_token() is None
        settings = settings_from(config, consumers_per_connection=1, service_url=URL)
        assert (settings.auth_method_name, settings.auth_data) == ("", b"")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"plugin": "org.apache.pulsar.client.impl.auth.AuthenticationTls", "data": "x"},
            "not supported",
        ),
        ({"plugin": PLUGIN}, "data: expected the token"),
        ({"plugin": PLUGIN, "data": "t", "params": 1}, "unknown key 'params'"),
        ("token:abc", "expected a mapping"),
        ({"plugin": PLUGIN, "data": "file:///no/such/token"}, "cannot read the token file"),
        ({"plugin": PLUGIN, "data": '{"tok": 1}'}, '{"token": "<jwt>"}'),
    ],
)
def test_bad_authentication_stops_the_run_at_parse_time(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match="d.yaml: ") as refused:
        _parse(value)
    assert message in str(refused.value)
    assert "authentication" in str(refused.value)


def test_connect_carries_the_token_to_the_server_codec() -> None:
    seen: list[tuple[str, bytes]] = []

    def check(method: str, data: bytes) -> str | None:
        seen.append((method, data))
        return None

    client = Connection(CLIENT)
    server = Connection(SERVER, server_version="test", authenticate=check)
    client.send(ev.Connect("c", 20, auth_method_name="token", auth_data=b"abc.def.ghi"))
    server.receive_data(client.data_to_send())
    assert isinstance(server.next_event(), ev.Connect)
    assert seen == [("token", b"abc.def.ghi")]

    plain = Connection(CLIENT)
    server = Connection(SERVER, server_version="test", authenticate=check)
    plain.send(ev.Connect("c", 20))
    server.receive_data(plain.data_to_send())
    assert isinstance(server.next_event(), ev.Connect)
    assert seen[-1] == ("", b"")

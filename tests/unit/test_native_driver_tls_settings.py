"""The driver file's TLS keys (OMB's names): the remote example's TLS lines as written, the
defaults, and a trust file that does not load."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from drivers.config import ConfigError
from drivers.pulsar.settings import PulsarConfig, settings_from
from harness.driver_config import load_driver_file
from tests.conftest import ROOT
from tests.tls_certificates import certificate_authority

REMOTE = ROOT / "drivers" / "pulsar-remote.yaml"


def test_the_remote_examples_tls_lines_load_as_written(tmp_path: Path) -> None:
    ca, _ = certificate_authority(tmp_path)
    # Uncomment the example's TLS lines (they replace the plain URLs), with a real trust file.
    text = re.sub(r"\n  (serviceUrl|adminUrl): [^\n]*", "", REMOTE.read_text())
    text = re.sub(r"\n  #   (\w+): ", r"\n  \1: ", text)
    text = text.replace("  tlsTrustCertsFilePath: null\n", "")
    text = text.replace("/etc/pulsar/certs/ca.cert.pem", str(ca))
    text = text.replace("sourceAddresses: 4", "sourceAddresses: 0")  # not a loopback broker
    (tmp_path / "remote-tls.yaml").write_text(text)
    driver = load_driver_file(tmp_path / "remote-tls.yaml")
    assert driver.config.service_url == "pulsar+ssl://broker.example.com:6651"
    assert driver.config.admin_url == "https://broker.example.com:8443"
    config = driver.config
    assert isinstance(config, PulsarConfig)
    assert config.client.tls_trust_certs_file_path == str(ca)
    admin = config.admin_tls()
    assert admin is not None and admin.check_hostname and admin.verify_mode == ssl.CERT_REQUIRED
    settings = settings_from(
        config, consumers_per_connection=1, service_url="pulsar+ssl://broker.example.com"
    )
    assert settings.port == 6651  # Pulsar's TLS port when the URL names none
    assert settings.tls is not None and settings.tls.check_hostname
    assert settings.tls_trust_file == str(ca)


def test_plain_urls_get_no_tls_and_the_defaults_check_everything() -> None:
    config = PulsarConfig.parse({"client": {"serviceUrl": "pulsar://h:6650"}}, "")
    assert settings_from(config, consumers_per_connection=1, service_url="pulsar://h").tls is None
    assert config.admin_tls() is None
    tls = settings_from(config, consumers_per_connection=1, service_url="pulsar+ssl://h").tls
    assert tls is not None and tls.check_hostname and tls.verify_mode == ssl.CERT_REQUIRED


def test_insecure_and_unverified_names_are_the_files_choice() -> None:
    client = {"serviceUrl": "pulsar+ssl://h", "tlsEnableHostnameVerification": False}
    unnamed = PulsarConfig.parse({"client": client}, "")
    tls = settings_from(unnamed, consumers_per_connection=1, service_url="pulsar+ssl://h").tls
    assert tls is not None and not tls.check_hostname and tls.verify_mode == ssl.CERT_REQUIRED
    insecure = PulsarConfig.parse({"client": {**client, "tlsAllowInsecureConnection": True}}, "")
    tls = settings_from(insecure, consumers_per_connection=1, service_url="pulsar+ssl://h").tls
    assert tls is not None and tls.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_trust_file_that_does_not_load_is_refused_naming_the_key(tmp_path, content) -> None:
    trust = tmp_path / "ca.pem"
    if content is not None:
        trust.write_text(content)
    client = {"serviceUrl": "pulsar+ssl://h", "tlsTrustCertsFilePath": str(trust)}
    with pytest.raises(ConfigError, match=r"^driver.yaml: key 'client.tlsTrustCertsFilePath'"):
        PulsarConfig.parse({"client": client}, "driver.yaml: ")

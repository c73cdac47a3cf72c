"""`bench broker`: run the bundled broker in the foreground."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

import yaml

from broker.config import BrokerConfig, BrokerConfigError

SETTINGS = tuple(f.name for f in fields(BrokerConfig))
"""Every setting `--config` and `--set` take: `bench run` checks a driver file's `broker:`
section against them before it starts anything (harness/run_command.py)."""


def settings_problem(settings: Mapping[str, object], source: str) -> str | None:
    """What the broker would refuse in `settings` when it starts (one line naming `source`);
    None when it would take them."""
    try:
        BrokerConfig.from_mapping(dict(settings), source)
    except BrokerConfigError as exc:
        return str(exc)
    return None


def _setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set takes NAME=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench broker", description=__doc__)
    parser.add_argument("--config", type=Path, help="YAML file of broker settings (Pulsar names)")
    parser.add_argument("--port", type=int, help="binary protocol port (default 6650)")
    parser.add_argument("--admin-port", type=int, help="admin HTTP port (default 8080)")
    parser.add_argument("--bind", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--data-dir", type=Path, help="journal, ledgers and cursors (default data/broker)"
    )
    parser.add_argument(
        "--stats-dir", type=Path, help="write stats-<n>.json here every few seconds"
    )
    parser.add_argument(
        "--set",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any broker setting, e.g. --set journalSyncData=false",
    )
    args = parser.parse_args(argv)
    overrides: dict[str, object] = dict(args.set)
    for flag, name in (
        ("port", "brokerServicePort"),
        ("admin_port", "webServicePort"),
        ("bind", "bindAddress"),
        ("data_dir", "dataDir"),
        ("stats_dir", "statsDir"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[name] = str(value) if isinstance(value, Path) else value
    try:
        if args.config:
            config = BrokerConfig.from_file(args.config, overrides)
        else:
            config = BrokerConfig.from_mapping(overrides, "command line")
        from broker.server.auth import security_mode
        from broker.server.tls import server_context

        security_mode(config)  # refuses to listen beyond loopback unauthenticated (unless waived)
        server_context(config)  # a TLS port without a certificate, or no port at all
    except BrokerConfigError as exc:
        print(f"bench broker: {exc}", file=sys.stderr)
        return 2
    from broker.app import run

    started = False

    def ready() -> None:
        nonlocal started
        started = True
        print(f"broker ready on {config.advertised_url}", flush=True)

    try:
        run(config, ready=ready)
    except OSError as exc:
        # Only an error before `ready` can be the listening socket's; one after it is the
        # data folder's (a full disk at shutdown: StorageError names the file system).
        if started or exc.filename:
            print(f"bench broker: {exc}", file=sys.stderr)
        else:
            print(f"bench broker: cannot listen on {config.advertised_url}: {exc}", file=sys.stderr)
        return 1
    return 0

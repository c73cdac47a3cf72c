"""harness/locust_first.py: gevent's plugins looked up once, and the same ones called as gevent's
own look-up per event would (in the `locust` test process: importing it patches)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from importlib import metadata
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.locust

CALLS: list[tuple[str, Any]] = []


def record_plugin(event: Any) -> None:
    """A plugin's entry point (named by its dotted path below)."""
    CALLS.append(("plugin", event))


class _Dist:
    """A distribution with a name and entry points, as importlib.metadata gives them."""

    def __init__(self, name: str, *entries: metadata.EntryPoint) -> None:
        self.metadata = {"Name": name}
        self.entry_points = list(entries)


def _entry(group: str, name: str = "p") -> metadata.EntryPoint:
    return metadata.EntryPoint(name, f"{__name__}:record_plugin", group)


def _event_groups() -> set[str]:
    import gevent.events

    return {
        getattr(cls, "ENTRY_POINT_NAME")  # noqa: B009 - on gevent's event classes only
        for cls in vars(gevent.events).values()
        if isinstance(cls, type) and isinstance(getattr(cls, "ENTRY_POINT_NAME", None), str)
    }


def test_the_installed_plugins_are_those_gevent_looks_up_per_event() -> None:
    from harness.locust_first import plugins_by_group

    found = plugins_by_group(metadata.distributions())
    groups = _event_groups()
    assert "gevent.plugins.monkey.will_patch_all" in groups  # gevent's own plugin's group
    for group in groups:
        expected = [(e.name, e.value) for e in metadata.entry_points(group=group)]
        assert [(e.name, e.value) for e in found.get(group, [])] == expected, group
    assert found["gevent.plugins.monkey.will_patch_all"]  # gevent.monkey:_subscribe_signal_os


def test_plugins_of_gevents_groups_only_each_distribution_once() -> None:
    from harness.locust_first import plugins_by_group

    dists: list[Any] = [
        _Dist("gevent", _entry("gevent.plugins.a"), _entry("console_scripts")),
        _Dist("Other.Plugin", _entry("gevent.plugins.a", "q"), _entry("gevent.plugins.b")),
        _Dist("other-plugin", _entry("gevent.plugins.c")),  # the same, later on the path
    ]
    found = plugins_by_group(dists)
    assert {group: [e.name for e in entries] for group, entries in found.items()} == {
        "gevent.plugins.a": ["p", "q"],
        "gevent.plugins.b": ["p"],
    }


def test_an_event_goes_to_its_subscribers_then_its_groups_plugins() -> None:
    import gevent.events

    from harness.locust_first import notifier

    class Event:
        ENTRY_POINT_NAME = "gevent.plugins.test"

    class OtherEvent:
        ENTRY_POINT_NAME = "gevent.plugins.other"

    notify = notifier({"gevent.plugins.test": [_entry("gevent.plugins.test")]})
    event, other = Event(), OtherEvent()
    subscriber = gevent.events.subscribers.append
    subscriber(lambda e: CALLS.append(("subscriber", e)))
    CALLS.clear()
    try:
        notify(event)
        notify(other)
    finally:
        gevent.events.subscribers.pop()
    assert CALLS == [("subscriber", event), ("plugin", event), ("subscriber", other)]


def test_the_process_is_patched_with_the_looked_up_plugins() -> None:
    import gevent.events
    import gevent.socket

    import harness.locust_first  # noqa: F401

    notify = getattr(gevent.events, "notify_and_call_entry_points")  # noqa: B009 - not in stubs
    assert notify.__module__ == "harness.locust_first"
    assert socket.socket is gevent.socket.socket


WEB_PROBE = """
import json, sys
import harness.locust_first, harness.coordinator, harness.worker
from locust.env import Environment
before = sorted(m for m in sys.modules if m.split(".")[0] in ("flask", "flask_login", "flask_cors"))
stand_in = type(sys.modules["locust.web"]).__name__
ui = Environment().create_web_ui("127.0.0.1", 0, delayed_start=True)
import locust, locust.web
print(json.dumps({
    "before": before,
    "stand_in": stand_in,
    "made": type(ui).__module__ + "." + type(ui).__qualname__,
    "real": type(ui) is locust.web.WebUI and locust.web is sys.modules["locust.web"],
    "flask_after": "flask" in sys.modules,
}))
"""


def test_the_web_ui_is_imported_only_when_one_is_made() -> None:
    """A fresh process, as `bench run` and `bench worker` are: Flask is not imported by the
    coordinator's or the worker's imports, and a web UI made anyway is Locust's own."""
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "before": [],
        "stand_in": "WebStandIn",
        "made": "locust.web.WebUI",
        "real": True,
        "flask_after": True,
    }


def test_the_stand_in_hands_other_names_to_the_real_module() -> None:
    import locust.env  # noqa: F401 - the stand-in, if this process's first import was the harness's

    from harness.locust_first import WEB, WebStandIn

    stand_in = WebStandIn(WEB)
    assert not hasattr(stand_in, "__path__")  # not a package: `from .web import WebUI` stays light
    assert stand_in.WebUI.__module__ == "harness.locust_first"
    import locust.web

    assert stand_in.logger is locust.web.logger  # a name only the real module has
    assert sys.modules[WEB] is locust.web

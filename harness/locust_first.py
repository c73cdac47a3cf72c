"""Imports Locust, which monkey-patches the process with gevent: imported first by the processes
that run Locust (`bench run`, `bench worker`), before anything opens a socket.

gevent's patch_all announces each of its 25 steps to the plugins installed for it, and looks
them up each time in every installed distribution's entry points: 132 distributions in the
venv, 0.25 of the 0.30 CPU-s of patch_all, in every coordinator and worker process (about 110
of them in a `make test`). Here the look-up is done once, and the same plugins are called in the
same order (gevent's own `gevent.plugins.monkey.will_patch_all` among them).

Locust's `env` module imports its web UI (`locust.web`: Flask, its login and CORS plugins) at
its top, which the harness never starts (its runners fire `init` with `web_ui=None`): 0.3 of the
1.24 CPU-s a coordinator's or worker's imports took (docs/benchmarks.md, "make test"). Here
`locust.web` is a stand-in whose `WebUI` imports the real module when one is made.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any

import gevent.events

PLUGIN_GROUPS = "gevent.plugins."
"""The prefix of every entry-point group gevent calls (gevent/events.py: ENTRY_POINT_NAME)."""


def plugins_by_group(
    distributions: Iterable[metadata.Distribution],
) -> dict[str, list[metadata.EntryPoint]]:
    """gevent's plugins in `distributions`, by group: each distribution once, by its name, the
    first found on the path winning (as `importlib.metadata.entry_points` does)."""
    seen: set[str] = set()
    found: dict[str, list[metadata.EntryPoint]] = {}
    for dist in distributions:
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name in seen:
            continue
        seen.add(name)
        for entry in dist.entry_points:
            if entry.group.startswith(PLUGIN_GROUPS):
                found.setdefault(entry.group, []).append(entry)
    return found


def notifier(plugins: dict[str, list[metadata.EntryPoint]]) -> Callable[[object], None]:
    """gevent.events.notify_and_call_entry_points over plugins looked up already: the event's
    subscribers, then each plugin of its group."""

    def notify_and_call_entry_points(event: object) -> None:
        gevent.events.notify(event)  # type: ignore[attr-defined] # zope.event's, not in the stubs
        for plugin in plugins.get(getattr(event, "ENTRY_POINT_NAME", ""), ()):
            plugin.load()(event)

    return notify_and_call_entry_points


# gevent.monkey and gevent.hub import the function from gevent.events when they call it (not
# in types-gevent's stubs).
gevent.events.notify_and_call_entry_points = notifier(  # type: ignore[attr-defined]
    plugins_by_group(metadata.distributions())
)

WEB = "locust.web"


def real_web() -> types.ModuleType:
    """Locust's own `locust.web`, imported in place of the stand-in."""
    if isinstance(sys.modules.get(WEB), WebStandIn):
        del sys.modules[WEB]
    return importlib.import_module(WEB)  # which sets it on the package too


class WebUI:
    """What `locust.env` imports as `WebUI`: making one makes Locust's own."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return real_web().WebUI(*args, **kwargs)


class WebStandIn(types.ModuleType):
    """`locust.web` until something asks it for more than `WebUI`."""

    WebUI = WebUI

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's own questions (`__path__`: a package?)
            raise AttributeError(name)
        return getattr(real_web(), name)


sys.modules.setdefault(WEB, WebStandIn(WEB))

import locust  # noqa: E402, F401, I001 - the patching itself

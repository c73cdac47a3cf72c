"""Imports Locust, which monkey-patches the process with gevent: imported first by the processes
that run Locust (`bench run`, `bench worker`), before anything opens a socket.

gevent's patch_all announces each of its 25 steps to the plugins installed for it, and looks
them up each time in every installed distribution's entry points: 132 distributions in the
venv, 0.25 of the 0.30 CPU-s of patch_all, in every coordinator and worker process (about 110
of them in a `make test`). Here the look-up is done once, and the same plugins are called in the
same order (gevent's own `gevent.plugins.monkey.will_patch_all` among them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from importlib import metadata

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

import locust  # noqa: E402, F401, I001 - the patching itself

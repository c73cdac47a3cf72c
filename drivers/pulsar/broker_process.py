"""What a run measuring a Pulsar broker it did not start reads from it (issue 26): the
version at the admin API's /admin/v2/brokers/version, and the process's CPU and memory on
/metrics under the Prometheus process collector's names, which Apache Pulsar's brokers and
the bundled one both serve (`process_cpu_seconds_total`, `process_resident_memory_bytes`).
"""

from __future__ import annotations

import ssl

from drivers.base import DriverError
from drivers.pulsar.admin import _call

VERSION_PATH = "/admin/v2/brokers/version"  # BrokersBase.version
METRICS_PATH = "/metrics"
CPU_METRIC = "process_cpu_seconds_total"
RSS_METRIC = "process_resident_memory_bytes"


def _get(url: str, token: str | None, tls: ssl.SSLContext | None) -> str | None:
    if not url.startswith(("http://", "https://")):
        return None
    try:
        status, body = _call("GET", url, token=token, tls=tls)
    except DriverError:
        return None
    return body.decode("utf-8", "replace") if status == 200 else None


def broker_version(
    admin_url: str, token: str | None = None, tls: ssl.SSLContext | None = None
) -> str | None:
    """The broker's version, or None when its admin API does not say (Pulsar answers a JSON
    string, the bundled broker plain text)."""
    text = _get(admin_url.rstrip("/") + VERSION_PATH, token, tls)
    text = (text or "").strip().strip('"').strip()
    return text.splitlines()[0][:100] if text else None


def parse_process_metrics(text: str) -> tuple[float, int] | None:
    """(CPU seconds, resident bytes, 0 when not given) from a Prometheus text page; None
    without the CPU. A labelled series (a page with several processes) is not the broker's."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in (CPU_METRIC, RSS_METRIC):
            try:
                values[name] = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
    if CPU_METRIC not in values:
        return None
    return values[CPU_METRIC], int(values.get(RSS_METRIC, 0))


def broker_process(
    admin_url: str, token: str | None = None, tls: ssl.SSLContext | None = None
) -> tuple[float, int] | None:
    """The broker process's (CPU seconds, resident bytes) from its /metrics, or None."""
    text = _get(admin_url.rstrip("/") + METRICS_PATH, token, tls)
    return None if text is None else parse_process_metrics(text)

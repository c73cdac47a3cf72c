"""Reading a broker's process metrics from its Prometheus page (harness/remote_broker.py)."""

from __future__ import annotations

from broker.admin.process_metrics import process_lines
from drivers.pulsar.broker_process import parse_process_metrics


def test_the_bundled_brokers_lines_are_what_the_harness_reads() -> None:
    cpu, rss = parse_process_metrics("\n".join(process_lines())) or (None, None)
    assert cpu is not None and cpu > 0 and rss is not None and rss > 0


def test_a_pulsar_page_and_pages_without_the_metric() -> None:
    page = (
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 1234.5\n"
        'pulsar_in_messages_total{topic="t"} 7\n'
        "process_resident_memory_bytes 2.147483648E9\n"
    )
    assert parse_process_metrics(page) == (1234.5, 2_147_483_648)
    assert parse_process_metrics("process_resident_memory_bytes 5\n") is None
    assert parse_process_metrics("process_cpu_seconds_total nan-ish\n") is None
    # Labelled series are some other process's, not this broker's total.
    assert parse_process_metrics('process_cpu_seconds_total{pid="1"} 9\n') is None
